//go:build linux || darwin

package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// A big record on a slow link: a body of about bigBody bytes, which the receiver reads a piece of
// pieceSize every pieceEvery (3.2s in all), three times the webhook's timeout, slowTimeout. The bytes
// move every pieceEvery or two, and the tail, from the last piece taken to the response, takes about
// three: the timeout leaves them room on a busy machine.
const (
	bigBody     = 2 << 20
	pieceSize   = 64 << 10
	pieceEvery  = 100 * time.Millisecond
	slowTimeout = time.Second
	recvBuffer  = 32 << 10
)

// slowReader is a receiver that reads each request's body a piece at a time, stops reading after
// stopAfter bytes when that is set (until the test ends), and answers 200 once it has read the body.
//
// Its sockets have a receive buffer of recvBuffer bytes. On loopback the kernel grows a receive buffer to
// megabytes: the bytes of a body would pile up there, taken at once and read by the receiver seconds
// later, and no sender can see them move in between. A link that is slow for its own sake holds few bytes
// in its pipe; so does this receiver.
type slowReader struct {
	srv       *httptest.Server
	stopAfter int
	release   chan struct{}

	mu       sync.Mutex
	bodies   [][]byte
	stalled  time.Time // when it stopped reading
	received int       // bytes read of the request in flight
}

func newSlowReader(t *testing.T, stopAfter int) *slowReader {
	t.Helper()
	s := &slowReader{stopAfter: stopAfter, release: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, recvBuffer)
		}); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, s.srv.Listener.Close())
	s.srv.Listener = l
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.release) }) // runs before the server closes
	return s
}

func (s *slowReader) serve(w http.ResponseWriter, r *http.Request) {
	var body []byte
	piece := make([]byte, pieceSize)
	tick := time.NewTicker(pieceEvery)
	defer tick.Stop()
	for {
		if s.stopAfter > 0 && len(body) >= s.stopAfter {
			s.mu.Lock()
			s.stalled = time.Now()
			s.mu.Unlock()
			select { // as a receiver that hangs: the client gives up, or the test ends
			case <-r.Context().Done():
			case <-s.release:
			}
			return
		}
		n, err := io.ReadFull(r.Body, piece)
		body = append(body, piece[:n]...)
		s.mu.Lock()
		s.received = len(body)
		s.mu.Unlock()
		if err != nil {
			break
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *slowReader) snapshot() (bodies [][]byte, stalled time.Time, received int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...), s.stalled, s.received
}

const documentsDDL = `
	CREATE TABLE documents (
		id         bigserial PRIMARY KEY,
		body       text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON documents (created_at, id);`

// TestABodyStillGoingOutIsDeliveredOnce sends a record of 2 MB through the processor to a receiver that
// reads it at 640 KB/s, 3.2s in all, under a webhook timeout of 1s and a handler timeout of 1.5s: the
// bytes keep moving, so neither cuts the request off, and the record is delivered once.
func TestABodyStillGoingOutIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	e.db.Exec(t, documentsDDL)
	pgtest.AddClock(t, e.db, "documents")
	e.db.Exec(t, "INSERT INTO documents (body) VALUES (repeat('d', 2 << 20))")
	s := newSlowReader(t, 0)
	cc, err := pgx.ParseConfig(e.db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:      inordertype.StartFromBeginning,
		Process:        "documents",
		ClientConfig:   processor.ClientConfig{ConnConfig: cc},
		Source:         inordertype.Source{Table: "documents"},
		Handler:        newHandler(t, s.srv.URL, func(c *webhook.Config) { c.Timeout = slowTimeout }),
		HandlerTimeout: slowTimeout * 3 / 2,
		PollInterval:   20 * time.Millisecond,
		RetryMin:       20 * time.Millisecond,
		RetryMax:       200 * time.Millisecond,
		Logger:         zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	require.NoError(t, err)
	began := time.Now()
	stop := testrun.Start(t, p.Run)
	eventually(t, "the record's position", func() bool { return sinktest.Position(t, e.db.Pool, "documents") == "1" })
	took := time.Since(began)
	require.NoError(t, stop())
	t.Logf("a body of %d bytes delivered in %s", bigBody, took.Round(time.Millisecond))

	bodies, _, _ := s.snapshot()
	require.Len(t, bodies, 1, "delivered once, never cut off and sent again")
	var got struct {
		ID      string `json:"id"`
		Attempt int    `json:"attempt"`
		Record  struct {
			Body string `json:"body"`
		} `json:"record"`
	}
	require.NoError(t, json.Unmarshal(bodies[0], &got))
	require.Equal(t, "1", got.ID)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, strings.Repeat("d", bigBody), got.Record.Body, "the body whole")
	require.Greater(t, took, 2*slowTimeout, "the body took longer than the timeouts to go out")
	var halted *string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		"SELECT halted_error FROM inorder.cursor WHERE process_name = 'documents'").Scan(&halted))
	require.Nil(t, halted, "no attempt failed")
}

// TestAReceiverThatStopsReadingIsCutOff sends a body of 2 MB to a receiver that reads it slowly for two
// seconds, twice the timeout, and then stops reading and never answers: the request is cut off once the
// bytes have stopped moving for the timeout, not while they move, with the error of a request that got
// no response.
func TestAReceiverThatStopsReadingIsCutOff(t *testing.T) {
	t.Parallel()
	s := newSlowReader(t, 20*pieceSize)
	h := newHandler(t, s.srv.URL+"/slow", func(c *webhook.Config) { c.Timeout = slowTimeout })
	rec := record("1", 1)
	rec.Value.Values[3] = json.RawMessage(`"` + strings.Repeat("d", bigBody) + `"`)
	// The outer deadline only keeps a handler that is never cut off from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	err := h.Handle(ctx, rec)
	ended := time.Now()
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Config.Timeout did not cut the request off")
	require.False(t, handlers.IsPermanent(err), "a timeout must be retried: %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "webhook POST "+s.srv.URL+"/slow: no response within 1s")

	_, stalled, received := s.snapshot()
	require.False(t, stalled.IsZero(), "cut off while the receiver still read: %v", err)
	t.Logf("the receiver read %d bytes in %s and stopped; the request was cut off %s later", received,
		stalled.Sub(began).Round(time.Millisecond), ended.Sub(stalled).Round(time.Millisecond))
	require.Less(t, ended.Sub(stalled), slowTimeout+time.Second, "not cut off within a timeout of silence and a margin")
}

// TestAnAnswerStillComingIsReadWhole: a refusal whose body comes 10 bytes every 50ms, 650ms for the
// excerpt the error keeps, twice the 300ms timeout, is read until the excerpt is whole.
func TestAnAnswerStillComingIsReadWhole(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadRequest)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 20 {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
			if _, err := io.WriteString(w, "0123456789"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	h := newHandler(t, srv.URL, func(c *webhook.Config) { c.Timeout, c.MaxErrorBody = 300*time.Millisecond, 100 })
	err := h.Handle(context.Background(), record("1", 1))
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadRequest, se.StatusCode)
	require.Equal(t, strings.Repeat("0123456789", 10)+"...", se.Body, "the excerpt whole")
}
