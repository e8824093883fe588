package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http/httptrace"
	"net/textproto"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/silence"
)

// watchedBody is the size from which a request body goes out through a reader that records its progress.
// A smaller body is taken whole by the connection's buffers at once, so there is no progress to see in
// it, and the transport sends it in the same write as the headers only when it is a *bytes.Reader: a
// small request costs what it did.
const watchedBody = 64 << 10

// unsentBytes is how many bytes a connection of the default client queues that it has not sent yet (see
// notSentLowat): the transport's piece of a body, 32 KiB.
const unsentBytes = 32 << 10

// request bounds one request by a silence rather than a length (silence.Bound): it is cut off once
// Config.Timeout has passed with nothing moving, counted from its start or from the last sign of progress,
// whichever is later. Progress is a piece of the body taken by the transport, an interim (1xx) response,
// the first byte of the response, its headers, and a piece of its body read. So a body of megabytes still
// going out on a slow link goes on, and a receiver that stops reading it, or never answers, is given up on
// a timeout after the last byte, as a fixed deadline gives up on it a timeout after the start.
//
// Each sign of progress is told to the processor as well (handlers.Progress on the handler call's
// context), so that its handler timeout counts a silence too.
type request struct {
	progress silence.Clock
	call     context.Context // the handler call's, told of progress
	trace    httptrace.ClientTrace
}

// watch returns the context of one request made in the handler call of call, cut off after a silence of
// timeout (its Err then context.DeadlineExceeded, as a deadline's), and the function that ends the
// request, which must be called.
func watch(call context.Context, timeout time.Duration) (*request, context.Context, context.CancelFunc) {
	r := &request{call: call}
	r.trace.GotFirstResponseByte = r.moved
	r.trace.Got1xxResponse = func(int, textproto.MIMEHeader) error { r.moved(); return nil }
	ctx, end := silence.Bound(call, &r.progress, timeout, context.DeadlineExceeded)
	return r, httptrace.WithClientTrace(ctx, &r.trace), end
}

// moved records progress, and tells the processor of it.
func (r *request) moved() {
	r.progress.Moved()
	handlers.Progress(r.call)
}

// sending is a request body that records its progress as the transport reads it. It has no WriteTo, so
// that the transport reads it piece by piece as the connection takes the bytes.
type sending struct {
	body *bytes.Reader
	r    *request
}

func (s *sending) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 {
		s.r.moved()
	}
	return n, err
}

func (s *sending) Close() error { return nil }

// receiving is a response body that records its progress as it is read.
type receiving struct {
	io.ReadCloser
	r *request
}

func (b *receiving) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.r.moved()
	}
	return n, err
}
