package dial_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/dial"
)

// timeout is the bound of the exchanges below: long enough that a byte sent every tenth of it is never
// late by all of it on a loaded machine, short enough to keep the tests to a second or two.
const timeout = 400 * time.Millisecond

// slack is how much later than its bound a cut-off may come on a loaded machine.
const slack = 2 * time.Second

// errSilent is the cause the exchanges below are cut off with.
var errSilent = errors.New("no answer")

// link is a TCP connection on loopback dialled by Configure's dialer: conn on the client's side, read
// all along as pgx reads an answer, and peer on the server's.
type link struct {
	conn *dial.Conn
	peer net.Conn
	got  atomic.Int64 // bytes read on conn
}

func dialLink(t *testing.T) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cc, err := pgx.ParseConfig("postgres://inorder@" + ln.Addr().String() + "/inorder")
	require.NoError(t, err)
	dial.Configure(cc, timeout)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	nc, err := cc.DialFunc(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	conn, ok := nc.(*dial.Conn)
	require.True(t, ok, "Configure's dialer gives a *dial.Conn, got %T", nc)
	peer, ok := <-accepted
	require.True(t, ok, "the listener accepted the connection")
	l := &link{conn: conn, peer: peer}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			l.got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		_ = peer.Close()
		<-done
	})
	return l
}

// send writes one byte from the server's side and returns when it was written.
func (l *link) send(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	_, err := l.peer.Write([]byte{'.'})
	require.NoError(t, err)
	return at
}

// awaitCut waits for ctx to be cut off and returns when it was seen so, no earlier than it was.
func awaitCut(t *testing.T, ctx context.Context, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		require.FailNow(t, "the exchange was not cut off", "within %s", within)
	}
	at := time.Now()
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "a cut-off reads as a deadline, as pgx expects")
	require.Same(t, errSilent, context.Cause(ctx))
	return at
}

func TestBoundedCutsOffASilenceAndNotAnAnswerStillComing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// before sends a byte, read, before the exchange begins.
		before bool
		// A byte is sent every so often after the exchange begins (first at once), until it has run for
		// that long; none with a zero every.
		every, until time.Duration
		// One byte is sent this long after the exchange began; none when zero.
		late time.Duration
	}{
		{name: "silence from the start"},
		{name: "a byte before the exchange began does not count", before: true},
		{name: "bytes coming for three timeouts, then silence", every: timeout / 8, until: 3 * timeout},
		{name: "one byte late in the exchange moves the bound past it", late: timeout / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := dialLink(t)
			if tc.before {
				l.send(t)
				require.Eventually(t, func() bool { return l.got.Load() == 1 }, slack, time.Millisecond)
			}
			began := time.Now()
			ctx, cancel := dial.Bounded(context.Background(), l.conn, timeout, errSilent)
			defer cancel()
			last := began
			if tc.every > 0 {
				for time.Since(began) < tc.until {
					last = l.send(t)
					time.Sleep(tc.every) // the pace of the answer, not a wait for something
				}
				require.NoError(t, ctx.Err(), "an exchange still receiving bytes goes on")
			}
			if tc.late > 0 {
				time.Sleep(tc.late) // when the byte comes
				require.NoError(t, ctx.Err())
				last = l.send(t)
			}
			cut := awaitCut(t, ctx, time.Until(last.Add(timeout+slack)))
			require.GreaterOrEqual(t, cut.Sub(last), timeout, "cut off no sooner than the timeout after the last byte")
			require.GreaterOrEqual(t, cut.Sub(began), timeout, "cut off no sooner than the timeout after the start")
		})
	}
}

func TestBoundedEndsWithItsCancelOrItsParent(t *testing.T) {
	t.Parallel()
	l := dialLink(t)
	ctx, cancel := dial.Bounded(context.Background(), l.conn, timeout, errSilent)
	cancel()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(ctx), context.Canceled)
	cancel() // twice is fine

	parentCause := errors.New("shutting down")
	parent, stop := context.WithCancelCause(context.Background())
	ctx, cancel = dial.Bounded(parent, l.conn, timeout, errSilent)
	defer cancel()
	stop(parentCause)
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "the caller's cancellation is no timeout")
	require.Same(t, parentCause, context.Cause(ctx))
}

func TestBoundedWithoutAConnIsADeadline(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ctx, cancel := dial.Bounded(context.Background(), nil, timeout, errSilent)
	defer cancel()
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, began.Add(timeout), deadline, slack)
	cut := awaitCut(t, ctx, timeout+slack)
	require.GreaterOrEqual(t, cut.Sub(began), timeout)
}

func TestTrackedFindsTheConnUnderAPgConn(t *testing.T) {
	t.Parallel()
	l := dialLink(t)
	config, err := pgconn.ParseConfig("")
	require.NoError(t, err)
	construct := func(nc net.Conn) *pgconn.PgConn {
		pc, err := pgconn.Construct(&pgconn.HijackedConn{Conn: nc, Config: config})
		require.NoError(t, err)
		return pc
	}
	require.Same(t, l.conn, dial.Tracked(construct(l.conn)), "a plain connection")
	require.Same(t, l.conn, dial.Tracked(construct(tls.Client(l.conn, &tls.Config{ServerName: "inorder"}))),
		"a connection under TLS")
	require.Nil(t, dial.Tracked(construct(l.peer)), "a connection dialled elsewhere records nothing")
	require.Nil(t, dial.Tracked(nil))
}
