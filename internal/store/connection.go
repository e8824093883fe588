package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// Session is a repository's connection, borrowed from the shared pool while it works, and the transaction
// open on it. The repository's other parts work through it.
type Session struct {
	name string
	cfg  Config

	mu   sync.Mutex // guards conn swaps against Close from another goroutine
	conn *pgx.Conn
	// shared lends conn (as pconn) for a cursor transaction or a look at the lease; conn is nil between
	// them (see attach and Detach).
	shared *Shared
	own    *Shared // shared when the repository's own (opened without Config.Shared): closed with it
	pconn  *pgxpool.Conn
	dirty  bool // the open transaction changed the cursor row
	// tx is the open transaction that holds the row lock, nil when none is open. It is always handle:
	// pgx's handle of the connection's first transaction, kept for the connection's life, while the
	// transactions themselves begin and end with BEGIN, COMMIT and ROLLBACK sent in the same round trip
	// as the statements around them (see Lock.lock and Lock.commitRelock). pgx's handle only sends what it
	// is asked to (savepoints, statements), so it serves every transaction of the connection alike.
	tx, handle pgx.Tx
	// former is the backend that served this instance's cursor transactions before the last Reconnect,
	// until a lock shows that it holds nothing (see Lease.endFormer).
	former   uint32
	released bool
	// The connection: whether it goes through a pooler, and whether the backend serving it changed
	// between transactions (transaction pooling).
	pooled, movesBackends bool
	backend               uint32 // the backend that served the last cursor transaction
}

func (r *Session) connect(ctx context.Context) error {
	r.mu.Lock()
	r.tx, r.handle, r.dirty = nil, nil, false
	r.mu.Unlock()
	return r.attach(ctx)
}

// closeOwn closes the shared connections that are the repository's own, if it has them.
func (r *Session) closeOwn() {
	if r.own != nil {
		r.own.Close()
	}
}

// Conn returns the repository's connection: one borrowed from the shared pool until Detach (or the end of the transaction that holds the row). While the cursor is locked, statements on it
// run inside the lock-holding transaction.
func (r *Session) Conn(ctx context.Context) (*pgx.Conn, error) {
	if err := r.attach(ctx); err != nil {
		return nil, fmt.Errorf("cursor %q: %w", r.name, err)
	}
	return r.conn, nil
}

// attach borrows a connection of the shared pool when the repository works on shared connections and has
// none; it waits for one at most a third of the lease.
func (r *Session) attach(ctx context.Context) error {
	if r.pconn != nil {
		return nil
	}
	if r.released {
		return ErrReleased
	}
	c, err := r.shared.acquire(ctx, r.cfg.lease()/3)
	if err != nil {
		return err
	}
	conn := c.Conn()
	r.mu.Lock()
	r.pconn, r.conn, r.handle = c, conn, r.shared.handle(conn)
	// The backend is compared within one loan only: another loan is another connection.
	r.pooled, r.backend = r.shared.isPooled(conn), 0
	r.mu.Unlock()
	return nil
}

// Detach gives a connection borrowed from the shared pool back when no transaction is open on it, so
// that an idle process, or a standby, holds none.
func (r *Session) Detach() {
	if r.pconn == nil || r.tx != nil {
		return
	}
	r.mu.Lock()
	c, conn, h := r.pconn, r.conn, r.handle
	r.pconn, r.conn, r.handle = nil, nil, nil
	r.mu.Unlock()
	if !conn.IsClosed() {
		r.shared.keepHandle(conn, h)
	}
	r.shared.giveBack(c)
}

// letGo gives the connection back at Release whatever it holds: a transaction still open on it (its end
// could not be sent or answered) ends with the connection, which the pool then drops. A connection kept
// would keep the pool, and the Client's Close, waiting for it.
func (r *Session) letGo() {
	if r.pconn != nil && r.tx != nil {
		r.closeConn()
		r.tx = nil
	}
	r.Detach()
}

// Contended reports whether, on shared connections, another process of the instance waits for a
// connection now: an owner then ends its transaction with its batch rather than keep the row for the next.
func (r *Session) Contended() bool { return r.shared.Contended() }

// Pooled reports whether the connection goes through a pooler, and transactions whether the pooler was
// seen to pool by transaction (the backend serving the connection changed between transactions).
func (r *Session) Pooled() (pooled, transactions bool) { return r.pooled, r.movesBackends }

// Bounded gives one exchange with the database its deadline (Config.Timeout): the repository's own, and
// those its user makes on its connection (a read, a poll). The deadline measures progress (see
// dial.Bounded): the exchange is cut off once the connection has received nothing for Config.Timeout, so
// that a read of big rows that keeps arriving on a slow link is not taken for a dead connection.
func (r *Session) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return r.bounded(ctx)
}

// bounded bounds one exchange on the repository's connection as it is now: a dedicated connection, or the
// one lent by the shared pool (with none lent yet, the bound is a plain deadline).
func (r *Session) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	r.mu.Lock()
	conn := r.conn
	r.mu.Unlock()
	return r.boundedOn(ctx, conn)
}

// boundedOn bounds one exchange on conn: cut off once conn has received nothing for Config.Timeout.
func (r *Session) boundedOn(ctx context.Context, conn *pgx.Conn) (context.Context, context.CancelFunc) {
	var tracked *dial.Conn
	if conn != nil {
		tracked = dial.Tracked(conn.PgConn())
	}
	return dial.Bounded(ctx, tracked, r.cfg.timeout(), &UnansweredError{Timeout: r.cfg.timeout()})
}

// UnansweredError is the cause of an exchange cut off by Config.Timeout: the database did not answer
// in time (on the repository's exchanges, it sent nothing for that long: see Bounded), and the connection
// counts as dead.
type UnansweredError struct{ Timeout time.Duration }

func (e *UnansweredError) Error() string {
	return fmt.Sprintf("the database did not answer within %s", e.Timeout)
}

// Unanswered reports whether err comes from an exchange that the repository's Timeout cut off, on the
// context of that exchange; use it as Unanswered(ctx, err) with the caller's own context to tell it
// from the caller's cancellation.
func Unanswered(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// closeConn closes the connection after a COMMIT or ROLLBACK that could not be sent or answered: its
// transaction may still be open on the server, holding the row (and, with it, statements run next in it
// would not count), so the session goes, and the next exchange reconnects (see Broken).
func (r *Session) closeConn() {
	if r.conn == nil || r.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.conn.Close(ctx)
}

// Broken reports whether the connection is gone, so that the caller should Reconnect rather than give up.
func (r *Session) Broken(err error) bool {
	return (r.conn != nil && r.conn.IsClosed()) || IsConnectionError(err)
}

// Reconnect drops the current connection (and with it any lock) and borrows another. The lease stays: if
// nobody took the process meanwhile, this instance goes on owning it. It does not register the process
// again: a row gone while the instance ran is reported by the next TryLock (ErrForgotten).
func (r *Repository) Reconnect(ctx context.Context) error {
	if r.Session.released {
		return ErrReleased
	}
	r.Session.tx = nil
	if r.Session.backend != 0 && !r.Session.pooled {
		r.Session.former = r.Session.backend
	}
	// The pool's other connections most likely went the same way (a server restart, a failover): the
	// idle ones are closed, and those lent out are not lent again.
	r.Session.closeConn()
	r.Session.Detach()
	r.Session.shared.pool.Reset()
	r.Lock.rode, r.Position.known = false, false
	if err := r.Session.connect(ctx); err != nil {
		return err
	}
	pctx, cancel := r.Session.bounded(ctx)
	defer cancel()
	if err := r.Session.conn.Ping(pctx); err != nil {
		r.Session.closeConn()
		r.Session.Detach()
		return fmt.Errorf("reconnect cursor %q: %w", r.name, err)
	}
	return nil
}

// IsConnectionError reports whether err means the database could not be reached or the session was cut
// (as opposed to the database refusing what was asked): such errors are retried with backoff.
func IsConnectionError(err error) bool {
	if err == nil || pooler.Fatal(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 (connection exception), 57P01..57P03 (admin shutdown, crash shutdown, cannot connect
		// now), 25P03 (idle-in-transaction timeout), 25P04 (transaction timeout) and 57P05 (idle session
		// timeout) all mean this session is over.
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08",
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", pgErr.Code == "25P03",
			pgErr.Code == "25P04", pgErr.Code == "57P05":
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || errors.Is(err, net.ErrClosed) ||
		pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
