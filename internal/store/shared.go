package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// SharedConfig configures the connections that the repositories of one instance share.
type SharedConfig struct {
	// ConnConfig is the database connection configuration. Required.
	ConnConfig *pgx.ConnConfig
	// MaxConns bounds every connection the instance opens: one session for the advisory locks, and a pool
	// of MaxConns-1 for the cursor transactions and whatever else borrows from Pool. At least 2.
	MaxConns int
	// Instance names the instance, as Config.Instance does. Empty means "<hostname>:<pid>".
	Instance string
	// Timeout bounds each exchange on the session and each connection start-up, as Config.Timeout does.
	Timeout time.Duration
	// BeforeConnect, when set, is given a copy of ConnConfig before each connection of the pool and the
	// session (see dial.BeforeConnectFunc).
	BeforeConnect dial.BeforeConnectFunc
}

// Shared owns the connections that the repositories of one instance share, however many processes it runs
// or stands by for: a session that holds the advisory lock of every process the instance owns (a session may
// hold many), and a pool that lends a connection to a repository for the length of its cursor transaction
// and to the short statements of a standby's look at a lease. A repository opened with Config.Shared
// borrows from it instead of opening a connection of its own.
//
// The pool's connections are named "inorder:@<instance>"; inside a cursor transaction the repository names
// it "inorder:<process>@<instance>" (SET LOCAL), as a dedicated connection is named, so that pg_stat_activity
// shows whose transaction it is and a standby can end a stale owner's transaction and nothing else.
type Shared struct {
	cfg      SharedConfig
	instance string
	pool     *pgxpool.Pool
	waiting  atomic.Int64 // repositories waiting for a connection of the pool

	mu      sync.Mutex
	handles map[*pgx.Conn]pgx.Tx // pgx's handle of each pool connection's first transaction (see Session.tx)
	pooled  map[*pgx.Conn]bool   // the pool connections that go through a pooler
	anyPool bool                 // some connection went through a pooler

	// The session, under sessionMu: gen grows by one each time the session is (re)connected or lost, so a
	// lock taken under an older gen is known lost.
	sessionMu     sync.Mutex
	session       *pgx.Conn
	sessionPooled bool
	gen           atomic.Uint64
	lost          atomic.Uint64 // the last gen known lost
	// lostCh is closed when the session of the current gen is lost (see lostSignal).
	lostCh chan struct{}

	transactions struct { // whether the pooler pools by transaction, once asked
		once  sync.Once
		moves bool
		err   error
	}

	stop chan struct{}
	done chan struct{}
}

// NewShared makes the shared connections of one instance. It opens none: the pool connects on first use.
func NewShared(cfg SharedConfig) (*Shared, error) {
	if cfg.ConnConfig == nil {
		return nil, errors.New("shared connections: SharedConfig.ConnConfig is required")
	}
	if cfg.MaxConns < 2 {
		return nil, fmt.Errorf("shared connections: at least 2 connections are needed (a session and one to work), got %d", cfg.MaxConns)
	}
	s := &Shared{cfg: cfg, handles: map[*pgx.Conn]pgx.Tx{}, pooled: map[*pgx.Conn]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.instance = instanceName(Config{Instance: cfg.Instance})
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = s.connConfig("inorder:@" + s.instance)
	pc.BeforeConnect = dial.ForPool(cfg.BeforeConnect)
	pc.MaxConns = int32(cfg.MaxConns - 1)
	pc.MinConns = 0
	// A pool connection holds nothing between transactions, so it may come and go; the defaults (an hour's
	// life, half an hour idle) are fine. What must not go is the session, which is not pooled.
	// pgxpool pings a connection idle for a second before lending it: a round trip before every batch of
	// a stream that wakes now and then. A dead connection fails its first statement instead, within the
	// deadline, and the repository takes another; only one idle for long is pinged.
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > time.Minute }
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		ctx, cancel := context.WithTimeout(ctx, s.timeout())
		defer cancel()
		pooled, _, err := pooler.Pooled(ctx, conn)
		if err != nil {
			return pooler.Explain(err)
		}
		s.mu.Lock()
		s.pooled[conn] = pooled
		s.anyPool = s.anyPool || pooled
		s.mu.Unlock()
		return nil
	}
	pc.BeforeClose = func(conn *pgx.Conn) {
		s.mu.Lock()
		delete(s.handles, conn)
		delete(s.pooled, conn)
		s.mu.Unlock()
	}
	s.pool, err = pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("shared connections: %w", err)
	}
	go s.watch()
	return s, nil
}

// connConfig is cfg's ConnConfig named name, with the dial's deadlines.
func (s *Shared) connConfig(name string) *pgx.ConnConfig {
	cc := s.cfg.ConnConfig.Copy()
	cc.RuntimeParams = map[string]string{}
	for k, v := range s.cfg.ConnConfig.RuntimeParams {
		cc.RuntimeParams[k] = v
	}
	cc.RuntimeParams["application_name"] = name
	dial.Configure(cc, s.timeout())
	return cc
}

func (s *Shared) timeout() time.Duration {
	if s.cfg.Timeout <= 0 {
		return dial.DefaultTimeout
	}
	return s.cfg.Timeout
}

// Pool is the pool the repositories borrow from. Others may borrow from it too (the probe, metrics); what
// they hold, the repositories wait for.
func (s *Shared) Pool() *pgxpool.Pool { return s.pool }

// ConnConfig is the configuration the connections are made from.
func (s *Shared) ConnConfig() *pgx.ConnConfig { return s.cfg.ConnConfig }

// Instance is the instance's name.
func (s *Shared) Instance() string { return s.instance }

// MaxConns is the bound on the instance's connections.
func (s *Shared) MaxConns() int { return s.cfg.MaxConns }

// acquire lends a connection of the pool, waiting at most for the given time.
func (s *Shared) acquire(ctx context.Context, wait time.Duration) (*pgxpool.Conn, error) {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	ctx, cancel := context.WithTimeoutCause(ctx, wait, &BusyError{Wait: wait, MaxConns: s.cfg.MaxConns})
	defer cancel()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			var busy *BusyError
			if errors.As(cause, &busy) && s.pool.Stat().TotalConns() >= s.pool.Config().MaxConns {
				return nil, busy
			}
		}
		return nil, err
	}
	return c, nil
}

// giveBack returns a connection lent by the pool. A closed one (dead, or closed after a statement the
// deadline cut off) is taken out of the pool instead: given back, the pool would hold its place until its
// clean-up ends (a cancel request on a dead path waits up to 15 seconds), and whoever waits for a
// connection, a reconnect first of all, would wait for that.
func (s *Shared) giveBack(c *pgxpool.Conn) {
	conn := c.Conn()
	if !conn.IsClosed() {
		c.Release()
		return
	}
	c.Hijack()
	s.mu.Lock()
	delete(s.handles, conn)
	delete(s.pooled, conn)
	s.mu.Unlock()
}

// Contended reports whether some repository waits for a connection of the pool now.
func (s *Shared) Contended() bool { return s.waiting.Load() > 0 }

// BusyError says that every connection of the pool stayed lent for as long as a repository waited for one.
type BusyError struct {
	Wait     time.Duration
	MaxConns int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("every connection of the instance (%d, its max-conns) stayed busy for %s", e.MaxConns, e.Wait)
}

// handle returns pgx's transaction handle kept for conn, if any.
func (s *Shared) handle(conn *pgx.Conn) pgx.Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handles[conn]
}

func (s *Shared) keepHandle(conn *pgx.Conn, h pgx.Tx) {
	if h == nil {
		return
	}
	s.mu.Lock()
	if _, ok := s.pooled[conn]; ok { // still the pool's
		s.handles[conn] = h
	}
	s.mu.Unlock()
}

// isPooled reports whether conn goes through a pooler.
func (s *Shared) isPooled(conn *pgx.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pooled[conn]
}

// Pooled reports whether any connection went through a pooler, and whether it pools by transaction (asked
// once, on two connections taken out of the pool, only when pooled).
func (s *Shared) Pooled(ctx context.Context) (pooled, transactions bool, err error) {
	s.mu.Lock()
	pooled = s.anyPool || s.sessionPooled
	s.mu.Unlock()
	if !pooled {
		return false, false, nil
	}
	s.transactions.once.Do(func() {
		first, _, err := s.take(ctx)
		if err != nil {
			s.transactions.err = err
			return
		}
		s.transactions.moves, s.transactions.err = pooler.PoolsTransactions(ctx, first,
			func(ctx context.Context) (*pgx.Conn, error) {
				conn, _, err := s.take(ctx)
				return conn, err
			})
	})
	return true, s.transactions.moves, s.transactions.err
}

// ErrTransactionPooled is returned by Session when the connections go through a pooler in transaction
// mode, which keeps no session for a client: what a session holds (LISTEN, a session's advisory lock) would
// land on a server connection that other clients then use.
var ErrTransactionPooled = errors.New("the connection goes through a pooler in transaction mode, which keeps no session for a client")

// Session returns a connection of the instance for what must hold a session of its own beside the pool (the
// wake-up listener, a partitioned process's coordinator), named name in pg_stat_activity. It is made by the
// pool, as every connection of the instance is (its credentials, its deadlines), and then taken out of it:
// the caller owns it and closes it. It refuses a pooler in transaction mode (ErrTransactionPooled).
func (s *Shared) Session(ctx context.Context, name string) (*pgx.Conn, error) {
	conn, pooled, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	if pooled {
		_, moves, err := s.Pooled(ctx)
		if err == nil && moves {
			err = ErrTransactionPooled
		}
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	sctx, cancel := context.WithTimeoutCause(ctx, s.timeout(), &UnansweredError{Timeout: s.timeout()})
	defer cancel()
	if _, err := conn.Exec(sctx, "SELECT set_config('application_name', $1, false)", name); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// take takes a connection out of the pool (the pool may make another in its place), reporting whether it
// goes through a pooler.
func (s *Shared) take(ctx context.Context) (*pgx.Conn, bool, error) {
	actx, cancel := context.WithTimeoutCause(ctx, s.timeout(), &UnansweredError{Timeout: s.timeout()})
	defer cancel()
	c, err := s.pool.Acquire(actx)
	if err != nil {
		return nil, false, pooler.Explain(err)
	}
	conn := c.Hijack()
	s.mu.Lock()
	pooled := s.pooled[conn]
	delete(s.handles, conn)
	delete(s.pooled, conn)
	s.mu.Unlock()
	return conn, pooled, nil
}

// tryLock takes the advisory lock key on the session, connecting it first if need be. It returns the
// session's generation the lock is held under; false when another session holds it, or the session goes
// through a pooler (whose sessions cannot be trusted).
func (s *Shared) tryLock(ctx context.Context, key int64) (bool, uint64, error) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if err := s.connectSession(ctx); err != nil {
		return false, 0, err
	}
	if s.sessionPooled {
		return false, 0, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout(), &UnansweredError{Timeout: s.timeout()})
	defer cancel()
	took, err := trySessionLock(ctx, s.session, key)
	if err != nil {
		s.loseSession()
		return false, 0, fmt.Errorf("session of the instance: %w", err)
	}
	return took, s.gen.Load(), nil
}

// unlock releases the advisory lock key taken under gen, unless the session that held it is gone.
func (s *Shared) unlock(ctx context.Context, key int64, gen uint64) error {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if s.session == nil || gen != s.gen.Load() || s.lost.Load() == gen {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout(), &UnansweredError{Timeout: s.timeout()})
	defer cancel()
	if err := unlockSession(ctx, s.session, key); err != nil {
		s.loseSession()
		return fmt.Errorf("session of the instance: %w", err)
	}
	return nil
}

// lostSignal returns a channel closed once the session a lock was taken on under gen is lost: already
// closed when it is.
func (s *Shared) lostSignal(gen uint64) <-chan struct{} {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	if s.session == nil || gen != s.gen.Load() || s.lost.Load() == gen {
		return closedSignal
	}
	return s.lostCh
}

// closedSignal is a channel closed for good, for what has already happened.
var closedSignal = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// holds reports whether a lock taken under gen is still held: the session it was taken on lives.
func (s *Shared) holds(gen uint64) bool {
	return gen != 0 && gen == s.gen.Load() && s.lost.Load() != gen
}

// connectSession connects the session when there is none. Under sessionMu.
func (s *Shared) connectSession(ctx context.Context) error {
	if s.session != nil && !s.session.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout(), &UnansweredError{Timeout: s.timeout()})
	defer cancel()
	conn, err := dial.Connect(ctx, s.connConfig("inorder-session:@"+s.instance), s.cfg.BeforeConnect)
	if err != nil {
		return fmt.Errorf("connect the session of the instance: %w", pooler.Explain(err))
	}
	pooled, _, err := pooler.Pooled(ctx, conn)
	if err != nil {
		conn.Close(ctx)
		return fmt.Errorf("connect the session of the instance: %w", pooler.Explain(err))
	}
	s.session, s.sessionPooled = conn, pooled
	s.lostCh = make(chan struct{})
	s.gen.Add(1)
	return nil
}

// loseSession closes the session: every lock on it is gone. Under sessionMu.
func (s *Shared) loseSession() {
	if s.session == nil {
		return
	}
	s.lost.Store(s.gen.Load())
	close(s.lostCh)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = s.session.Close(ctx)
	cancel()
	s.session = nil
}

// watch asks the session, now and then, whether it is still there: a session ended by the server (or cut
// off) takes its locks with it, and the owners must stop saying in their rows that a session holds them.
func (s *Shared) watch() {
	defer close(s.done)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sessionMu.Lock()
		if s.session != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout())
			if err := s.session.Ping(ctx); err != nil {
				s.loseSession()
			}
			cancel()
		}
		s.sessionMu.Unlock()
	}
}

// Close closes the session (releasing every advisory lock on it) and the pool. The repositories must be
// released first.
func (s *Shared) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.sessionMu.Lock()
	s.loseSession()
	s.sessionMu.Unlock()
	s.pool.Close()
}
