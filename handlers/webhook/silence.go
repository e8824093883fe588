package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inorder-dev/inorder/handlers"
)

// watchedBody is the size from which a request body goes out through a reader that records its progress.
// A smaller body is taken whole by the connection's buffers at once, so there is no progress to see in
// it, and the transport sends it in the same write as the headers only when it is a *bytes.Reader: a
// small request costs what it did.
const watchedBody = 64 << 10

// unsentBytes is how many bytes a connection of the default client queues that it has not sent yet (see
// notSentLowat): the transport's piece of a body, 32 KiB.
const unsentBytes = 32 << 10

// epoch is where the clock of progress starts: nanotime counts from it on the monotonic clock, which a
// change of the wall clock does not move.
var epoch = time.Now()

// nanotime is the clock of progress: nanoseconds since epoch, a number one atomic store keeps.
func nanotime() int64 { return int64(time.Since(epoch)) }

// request bounds one request by a silence rather than a length: it is cut off once Config.Timeout has
// passed with nothing moving, counted from its start or from the last sign of progress, whichever is
// later. Progress is a piece of the body taken by the transport, an interim (1xx) response, the first
// byte of the response, its headers, and a piece of its body read. So a body of megabytes still going out
// on a slow link goes on, and a receiver that stops reading it, or never answers, is given up on a timeout
// after the last byte, as a fixed deadline gives up on it a timeout after the start.
//
// Each sign of progress is told to the processor as well (handlers.Progress on the handler call's
// context), so that its handler timeout counts a silence too. One timer per request watches it, as a
// deadline's would: it fires a timeout after the start, finds the last progress, and is armed again for
// a timeout after it. No goroutine waits for it.
type request struct {
	context.Context // the request's: cancelled with context.DeadlineExceeded once it has been silent
	cancel          context.CancelCauseFunc
	call            context.Context // the handler call's, told of progress
	timeout, began  int64           // nanoseconds, and nanotime
	last            atomic.Int64    // nanotime of the last progress; 0 before the first
	cut             atomic.Bool     // set before the cancel that cuts the request off
	trace           httptrace.ClientTrace

	mu    sync.Mutex
	timer *time.Timer
	over  bool // cut off or ended: the timer is not armed again
}

// watch returns the context of one request made in the handler call of call, cut off after a silence of
// timeout, and the function that ends the request, which must be called.
func watch(call context.Context, timeout time.Duration) (*request, context.Context, func()) {
	ctx, cancel := context.WithCancelCause(call)
	r := &request{Context: ctx, cancel: cancel, call: call, timeout: int64(timeout), began: nanotime()}
	r.trace.GotFirstResponseByte = r.moved
	r.trace.Got1xxResponse = func(int, textproto.MIMEHeader) error { r.moved(); return nil }
	r.mu.Lock()
	r.timer = time.AfterFunc(timeout, r.check)
	r.mu.Unlock()
	return r, httptrace.WithClientTrace(r, &r.trace), r.stop
}

// moved records progress, and tells the processor.
func (r *request) moved() {
	r.last.Store(nanotime())
	handlers.Progress(r.call)
}

// Err is the error of the context, context.DeadlineExceeded once the request was cut off, as a deadline's
// would be.
func (r *request) Err() error {
	err := r.Context.Err()
	if err != nil && r.cut.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// check cuts the request off when the timeout has passed since it began or since its last progress,
// whichever is later, and otherwise arms the timer again for that moment.
func (r *request) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return
	}
	from := max(r.began, r.last.Load())
	if left := from + r.timeout - nanotime(); left > 0 {
		r.timer.Reset(time.Duration(left))
		return
	}
	r.over = true
	if r.Context.Err() == nil { // the handler call's own end, when it came first, stays what it is
		r.cut.Store(true)
	}
	r.cancel(context.DeadlineExceeded)
}

// stop ends the request: the timer is not armed again, and the context is cancelled.
func (r *request) stop() {
	r.mu.Lock()
	r.over = true
	r.timer.Stop()
	r.mu.Unlock()
	r.cancel(context.Canceled)
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
