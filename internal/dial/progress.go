package dial

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// epoch is where the clock of progress starts: nanotime counts from it on the monotonic clock, which a
// change of the wall clock does not move.
var epoch = time.Now()

// nanotime is the clock of progress: nanoseconds since epoch, a number one atomic store keeps.
func nanotime() int64 { return int64(time.Since(epoch)) }

// Conn is a connection dialled by the dialer Configure sets: it records when a Read last returned bytes,
// so that an exchange's deadline can tell an answer still arriving, however slowly (a batch of big rows on
// a slow link), from a silence (a path a NAT forgot). See Bounded. The record costs one read of the
// monotonic clock and one atomic store per Read that returned bytes, next to a system call.
type Conn struct {
	net.Conn
	last atomic.Int64 // nanotime of the last Read that returned bytes; 0 before the first
}

// Read reads from the connection and records the time when it returned bytes.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.last.Store(nanotime())
	}
	return n, err
}

// NetConn returns the connection Conn wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Tracked returns the Conn under pc (under its TLS when it has one), or nil when pc is nil or its
// connection was not dialled through Configure.
func Tracked(pc *pgconn.PgConn) *Conn {
	if pc == nil {
		return nil
	}
	nc := pc.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	c, _ := nc.(*Conn)
	return c
}

// Bounded returns a context for one exchange on c (a statement, a pipeline, a read of many rows) that is
// cut off once timeout has passed with no bytes received on c since the exchange began: an answer that
// keeps arriving, however slowly, goes on, and a silence is noticed within timeout of the last byte, as
// a fixed deadline would notice it from the start. Cut off, its Err is context.DeadlineExceeded, as a
// deadline's would be (so that what pgx reports of the exchange is a timeout), and context.Cause gives
// cause. The cancel function ends the exchange and must be called. With a nil c (a connection that was
// not dialled through Configure, or none yet), the bound is a plain deadline: context.WithTimeoutCause.
//
// One timer per exchange watches it: it fires when timeout has passed since the exchange began or the
// last byte came, whichever is later, and is armed again for the same from the last byte when bytes came
// meanwhile. No goroutine waits for it. Contexts derived from the one returned see context.Canceled
// rather than context.DeadlineExceeded when it is cut off; pass the one returned to pgx.
func Bounded(parent context.Context, c *Conn, timeout time.Duration, cause error) (context.Context, context.CancelFunc) {
	if c == nil {
		return context.WithTimeoutCause(parent, timeout, cause)
	}
	ctx, cancel := context.WithCancelCause(parent)
	x := &exchange{Context: ctx, cancel: cancel, conn: c, timeout: int64(timeout), began: nanotime(), cause: cause}
	x.mu.Lock()
	x.timer = time.AfterFunc(timeout, x.check)
	x.mu.Unlock()
	return x, x.stop
}

// exchange is the context Bounded returns when the connection records its progress.
type exchange struct {
	context.Context // cancelled with cause when the exchange is cut off
	cancel          context.CancelCauseFunc
	conn            *Conn
	timeout, began  int64 // nanoseconds, and nanotime
	cause           error
	cut             atomic.Bool // set before the cancel that cuts the exchange off

	mu    sync.Mutex
	timer *time.Timer
	over  bool // cut off or ended: the timer is not armed again
}

// Err is the error of the context, context.DeadlineExceeded once the exchange was cut off.
func (x *exchange) Err() error {
	err := x.Context.Err()
	if err != nil && x.cut.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// check cuts the exchange off when timeout has passed since it began or since the last byte, whichever
// is later, and otherwise arms the timer again for that moment.
func (x *exchange) check() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.over {
		return
	}
	from := max(x.began, x.conn.last.Load())
	if left := from + x.timeout - nanotime(); left > 0 {
		x.timer.Reset(time.Duration(left))
		return
	}
	x.over = true
	if x.Context.Err() == nil { // the parent's cancellation, when it came first, stays what it is
		x.cut.Store(true)
	}
	x.cancel(x.cause)
}

// stop ends the exchange: the timer is not armed again, and the context is cancelled.
func (x *exchange) stop() {
	x.mu.Lock()
	x.over = true
	x.timer.Stop()
	x.mu.Unlock()
	x.cancel(context.Canceled)
}
