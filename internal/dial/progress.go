package dial

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/internal/silence"
)

// Conn is a connection dialled by the dialer Configure sets: it records when a Read last returned bytes,
// so that an exchange's deadline can tell an answer still arriving, however slowly (a batch of big rows on
// a slow link), from a silence (a path a NAT forgot). See Bounded. The record costs one read of the
// monotonic clock and one atomic store per Read that returned bytes, next to a system call.
type Conn struct {
	net.Conn
	progress silence.Clock
}

// Read reads from the connection and records the time when it returned bytes.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.progress.Moved()
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
// cut off once timeout has passed with no bytes received on c since the exchange began (silence.Bound):
// an answer that keeps arriving, however slowly, goes on, and a silence is noticed within timeout of the
// last byte, as a fixed deadline would notice it from the start. Cut off, its Err is
// context.DeadlineExceeded and context.Cause gives cause. The cancel function ends the exchange and must be
// called. With a nil c (a connection that was not dialled through Configure, or none yet), the bound is a
// plain deadline: context.WithTimeoutCause.
func Bounded(parent context.Context, c *Conn, timeout time.Duration, cause error) (context.Context, context.CancelFunc) {
	if c == nil {
		return context.WithTimeoutCause(parent, timeout, cause)
	}
	return silence.Bound(parent, &c.progress, timeout, cause)
}
