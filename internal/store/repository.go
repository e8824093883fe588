package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// ErrNotLocked is returned by operations that need the cursor row lock when the repository does not hold
// it.
var ErrNotLocked = errors.New("cursor is not locked")

// ErrInUse is returned by Claim when another user in this Go process already works the repository: two
// processors of one process, as one instance.
var ErrInUse = errors.New("cursor repository is already in use in this process")

// ErrReleased is returned by every operation after Release.
var ErrReleased = errors.New("cursor repository was released")

// Config configures a cursor repository.
type Config struct {
	// ConnConfig is the database connection configuration. The repository copies it and names its
	// session; it opens one dedicated connection from it. Required.
	ConnConfig *pgx.ConnConfig

	// IdleInTransactionTimeout is set (SET LOCAL) as idle_in_transaction_session_timeout in every cursor
	// transaction. When an instance freezes while it holds the cursor row, Postgres ends its session after
	// this long, which releases the row. A handler call must finish well within it. Zero means 60 seconds.
	IdleInTransactionTimeout time.Duration

	// Lease is how long an instance owns the process without renewing: the owner renews it in its batch
	// transactions once a third of it has passed, and a standby takes the process once it has run out. It
	// bounds how long a frozen or vanished owner keeps the process (on a direct connection a standby
	// takes over as soon as the owner's session ends). Zero means 30 seconds.
	Lease time.Duration

	// Start is where the process starts if it has no cursor row. The zero value registers nothing: Open
	// then leaves the row missing (Missing reports it) for the caller to Register once it has decided.
	Start inordertype.StartFrom

	// Instance names this instance in the cursor row's owner and in application_name, so that status can
	// say who works a process. Empty means "<hostname>:<pid>".
	Instance string

	// Transactional says that the cursor transaction also carries the handler's own writes (a
	// transactional handler). Its transactions then do not say they write nothing (see NoInsertLockKey),
	// so that processors reading a table those writes may reach wait for them (see the horizon), and the
	// session is named "inorder-tx:…" instead of "inorder:…".
	Transactional bool

	// SynchronousCommit makes the commits of the cursor transactions (positions, halts, parked records)
	// wait for their WAL flush, as the server's synchronous_commit says. False sets synchronous_commit =
	// off for them (SET LOCAL): a crash of Postgres may then lose the last of them, which only delivers
	// those records again, and any later durable commit (WAL is flushed in order) makes them durable too.
	// A Transactional repository's commits always wait: they carry the application's own writes, which
	// others may read (and act on) as soon as they are committed.
	SynchronousCommit bool

	// Shared, when set, gives the repository the instance's shared connections instead of one of its own
	// (see Shared): ConnConfig and Instance are then the Shared's, and the repository holds a connection
	// only for the length of a cursor transaction or a look at the lease.
	Shared *Shared

	// Timeout bounds every exchange of the repository with the database: a statement, a pipeline of them,
	// a commit, and the connection's start-up. An exchange that takes longer ends the connection, which
	// then counts as dead (see Broken): a connection that a NAT or a load balancer forgot never errors by
	// itself. Zero means dial.DefaultTimeout.
	Timeout time.Duration
}

func (c *Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return dial.DefaultTimeout
	}
	return c.Timeout
}

func (c *Config) idleTimeout() time.Duration {
	if c.IdleInTransactionTimeout <= 0 {
		return 60 * time.Second
	}
	return c.IdleInTransactionTimeout
}

func (c *Config) lease() time.Duration {
	if c.Lease <= 0 {
		return 30 * time.Second
	}
	return c.Lease
}

// Repository owns the cursor row of one process: its lock, its position and its halt state. It works on
// a connection of its own, since the row lock lives in a transaction on that connection. Its methods are
// meant for one goroutine at a time, the processor that Claims it.
type Repository struct {
	name     string
	key      string // in its store
	cfg      Config
	store    *Store
	lockSQL  string
	lockArgs []any // after the name
	// lockSQL17 is lockSQL for a server that has transaction_timeout (17 and later), which it turns off
	// for the transaction (see withoutTransactionTimeout); lockQuery picks one per connection.
	lockSQL17 string

	mu   sync.Mutex // guards conn swaps against Close from another goroutine
	conn *pgx.Conn
	// shared, when set, lends conn (as pconn) for a cursor transaction or a look at the lease; conn is nil
	// between them (see attach and Detach). advGen is the generation of the shared session under which
	// this repository took its advisory lock.
	shared *Shared
	pconn  *pgxpool.Conn
	advGen uint64
	dirty  bool // the open transaction changed the cursor row
	// tx is the open transaction that holds the row lock, nil when none is open. It is always handle:
	// pgx's handle of the connection's first transaction, kept for the connection's life, while the
	// transactions themselves begin and end with BEGIN, COMMIT and ROLLBACK sent in the same round trip
	// as the statements around them (see lock and commitRelock). pgx's handle only sends what it is asked
	// to (savepoints, statements), so it serves every transaction of the connection alike.
	tx, handle pgx.Tx
	// rider travels after the lock in every round trip that locks the row (see SetRider); rode says that
	// it ran in the open transaction and TakeRide has not reported it yet.
	rider          *Rider
	rode, rideNext bool
	// leaseFrom is when this instance sent the last statement that renewed its lease and has committed
	// since: the lease the row holds runs at least until leaseFrom + Lease. renewing is when the open
	// transaction last renewed it (zero: it did not); it counts once committed.
	leaseFrom, renewing time.Time
	// staleTried says that ending a stale owner's session was refused (no privilege): not tried again.
	staleTried bool
	ended      Ended // the sessions TryLock ended, until EndedSessions reports them
	// former is the backend that served this instance's cursor transactions before the last Reconnect,
	// until a lock shows that it holds nothing (see endFormer).
	former  uint32
	state   inordertype.State
	version string // the row's xmin when it was last locked
	// The process's checkpoint (see checkpoint.go): durable is what the database holds as of the last commit,
	// open what the open transaction has recorded (durable until it records more), next what the process
	// has reached, which the next commit records first. known says that durable is what the database holds;
	// when it is not (a new tenure, an operator's write, a commit whose answer was lost), the next lock reads
	// it. rowHalted says that the row holds a halt state, which only rewriting the row clears.
	durable, open recorded
	next          checkpoint
	known         bool
	rowHalted     bool
	current       int16 // the checkpoint table the database's clock named at the last lock
	claimed       bool
	released      bool
	// registered says this repository created the row (rather than finding it), so that Unregister
	// may remove it while nothing has used it.
	registered bool
	missing    bool // opened with the zero Start, and the row is not there (see Missing)

	// Ownership (see the package documentation).
	epoch    int64 // the epoch of this instance's tenure, for people; 0 when it does not own the process
	token    int64 // the tenure's random token, for the fence; 0 when it does not own the process
	advisory bool  // this session holds the process's advisory lock
	lease    lease // what the row said of its owner when last read
	// The connection: whether it goes through a pooler, and whether the backend serving it changed
	// between transactions (transaction pooling).
	pooled, movesBackends bool
	backend               uint32    // the backend that served the last cursor transaction
	beat                  time.Time // when this instance last said it is there (see heartbeat)
}

// lease is what a cursor row says of its owner.
type lease struct {
	epoch    int64
	token    int64
	instance string
	session  bool          // the owner holds the advisory lock on its session
	free     bool          // nobody owns the process: the lease ran out or was given up
	expired  bool          // the lease ran out (rather than being given up)
	left     time.Duration // until it runs out
}

// Name returns the process name the repository was opened for. No method takes a name: a repository can
// only ever touch its own row.
func (r *Repository) Name() string { return r.name }

// Claim marks the repository as worked by one user (a processor) until Unclaim. A second Claim fails with
// ErrInUse, so two processors in one Go process cannot share a cursor by mistake.
func (r *Repository) Claim() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return ErrReleased
	}
	if r.claimed || !claims.take(r.key) {
		return fmt.Errorf("cursor %q: %w", r.name, ErrInUse)
	}
	r.claimed = true
	return nil
}

// Unclaim ends a Claim.
func (r *Repository) Unclaim() {
	r.mu.Lock()
	if r.claimed {
		claims.give(r.key)
	}
	r.claimed = false
	r.mu.Unlock()
}

// ApplicationName is the application_name of the repository's connection: "inorder:<process>@<instance>",
// or "inorder-tx:<process>@<instance>" when Config.Transactional is set. Status counts the sessions of a
// process's instances by it.
func (r *Repository) ApplicationName() string {
	prefix := "inorder:"
	if r.cfg.Transactional {
		prefix = "inorder-tx:"
	}
	return prefix + r.name + "@" + r.instance()
}

// instance is the instance's name: Config.Instance, or "<hostname>:<pid>".
func (r *Repository) instance() string {
	if r.cfg.Instance != "" {
		return r.cfg.Instance
	}
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}

func (r *Repository) connect(ctx context.Context) error {
	if r.shared != nil {
		r.mu.Lock()
		r.tx, r.handle, r.rode, r.dirty, r.known = nil, nil, false, false, false
		r.mu.Unlock()
		return r.attach(ctx)
	}
	cc := r.cfg.ConnConfig.Copy()
	// Only application_name: a pooler refuses start-up parameters it does not know, and a session setting
	// would not hold through one anyway. The timeouts are set in each transaction (see lockStatement).
	cc.RuntimeParams = map[string]string{}
	for k, v := range r.cfg.ConnConfig.RuntimeParams {
		cc.RuntimeParams[k] = v
	}
	cc.RuntimeParams["application_name"] = r.ApplicationName()
	// A dead path is noticed in seconds, at start-up as on every exchange (see package dial).
	dial.Configure(cc, r.cfg.timeout())
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect cursor %q: %w", r.name, pooler.Explain(err))
	}
	pctx, cancel := r.bounded(ctx)
	pooled, backend, err := pooler.Pooled(pctx, conn)
	cancel()
	if err != nil {
		conn.Close(ctx)
		return fmt.Errorf("connect cursor %q: %w", r.name, pooler.Explain(err))
	}
	r.mu.Lock()
	r.conn, r.tx, r.handle, r.rode, r.dirty, r.advisory, r.known = conn, nil, nil, false, false, false, false
	r.pooled, r.backend = pooled, backend
	r.mu.Unlock()
	return nil
}

// register registers the process as Config.Start says; with the zero Start it only looks whether the
// row is there, and leaves Missing set when it is not.
func (r *Repository) register(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if err := CheckSchema(ctx, r.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if err := checkPrivileges(ctx, r.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if r.cfg.Start.IsZero() {
		var there bool
		if err := r.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)",
			r.name).Scan(&there); err != nil {
			return fmt.Errorf("look up cursor %q: %w", r.name, pooler.Explain(err))
		}
		r.missing = !there
	} else if err := r.Register(ctx, r.cfg.Start); err != nil {
		return err
	}
	return r.heartbeat(ctx, r.conn)
}

// Missing reports that the process had no cursor row when the repository was opened with the zero Start,
// and has not been registered since: the caller decides where it starts and calls Register.
func (r *Repository) Missing() bool { return r.missing }

// Register creates the process's cursor row at start, unless it exists (another instance registered it
// meanwhile: its position stands).
func (r *Repository) Register(ctx context.Context, start inordertype.StartFrom) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if start.IsZero() {
		return fmt.Errorf("register cursor %q: no start given", r.name)
	}
	if err := r.attach(ctx); err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, err)
	}
	var at any
	if t := start.Time(); !t.IsZero() {
		at = t.Add(-time.Microsecond) // after every row created before start.Time()
	}
	tag, err := r.conn.Exec(ctx, `
		INSERT INTO inorder.cursor (process_name, position_created_at)
		VALUES ($1, CASE WHEN $2 THEN clock_timestamp() ELSE $3::timestamptz END)
		ON CONFLICT (process_name) DO NOTHING`, r.name, start.IsNow(), at)
	if err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, pooler.Explain(err))
	}
	r.registered = r.registered || tag.RowsAffected() == 1
	r.missing = false
	return nil
}

// heartbeatSQL says that this instance runs the process, for a lease from now: status counts such rows,
// and forget refuses while one is live.
const heartbeatSQL = `
	INSERT INTO inorder.instance (process_name, instance, seen_until)
	VALUES ($1, $2, clock_timestamp() + $3::interval)
	ON CONFLICT (process_name, instance) DO UPDATE SET seen_until = EXCLUDED.seen_until`

// heartbeat renews this instance's row in inorder.instance on q (the connection, or the open cursor
// transaction) when a third of its lease has passed since the last time.
func (r *Repository) heartbeat(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if time.Since(r.beat) < r.cfg.lease()/3 {
		return nil
	}
	if _, err := q.Exec(ctx, heartbeatSQL, r.name, r.instance(), r.cfg.lease()); err != nil {
		return fmt.Errorf("cursor %q: say the instance is there: %w", r.name, pooler.Explain(err))
	}
	r.beat = time.Now()
	return nil
}

// Unregister deletes the cursor row this repository created, when nothing has used it since: no instance
// has locked it to work (which records the source), nor moved, paused or halted it, and no other instance
// of the process runs (says so in inorder.instance). A processor whose start-up checks fail calls it, so that a wrong column or a
// missing index leaves no process behind for status to show. It does nothing otherwise.
func (r *Repository) Unregister(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if !r.registered || r.tx != nil {
		return nil
	}
	if err := r.attach(ctx); err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	defer r.Detach()
	if r.conn == nil || r.conn.IsClosed() {
		return nil
	}
	_, err := r.conn.Exec(ctx, `
		DELETE FROM inorder.cursor c
		WHERE process_name = $1 AND source_table IS NULL AND records_handled = 0 AND NOT paused
		  AND halted_record_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM inorder.audit a WHERE a.process_name = c.process_name)
		  AND NOT EXISTS (SELECT 1 FROM inorder.instance i
		                  WHERE i.process_name = c.process_name AND i.instance <> $2
		                    AND i.seen_until > clock_timestamp())`, r.name, r.instance())
	if err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	r.registered = false
	return nil
}

// Conn returns the repository's connection: its dedicated one, or one borrowed from the shared pool until
// Detach (or the end of the transaction that holds the row). While the cursor is locked, statements on it
// run inside the lock-holding transaction.
func (r *Repository) Conn(ctx context.Context) (*pgx.Conn, error) {
	if err := r.attach(ctx); err != nil {
		return nil, fmt.Errorf("cursor %q: %w", r.name, err)
	}
	return r.conn, nil
}

// attach borrows a connection of the shared pool when the repository works on shared connections and has
// none; it waits for one at most a third of the lease.
func (r *Repository) attach(ctx context.Context) error {
	if r.shared == nil || r.pconn != nil {
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
// that an idle process, or a standby, holds none. A no-op on a dedicated connection.
func (r *Repository) Detach() {
	if r.shared == nil || r.pconn == nil || r.tx != nil {
		return
	}
	r.mu.Lock()
	c, conn, h := r.pconn, r.conn, r.handle
	r.pconn, r.conn, r.handle = nil, nil, nil
	r.mu.Unlock()
	if !conn.IsClosed() {
		r.shared.keepHandle(conn, h)
	}
	c.Release()
}

// Contended reports whether, on shared connections, another process of the instance waits for a
// connection now: an owner then ends its transaction with its batch rather than keep the row for the next.
func (r *Repository) Contended() bool { return r.shared != nil && r.shared.Contended() }

// Tx returns the transaction that holds the cursor row lock, or nil when the cursor is not locked. A
// TxHandler's writes go through it so that they commit with the position.
func (r *Repository) Tx() pgx.Tx { return r.tx }

// Owner reports whether this instance owned the process at its last look at the cursor row. TryLock
// returning false while Owner is true means the row itself is held for a moment by someone else: an
// operator action.
func (r *Repository) Owner() bool { return r.token != 0 }

// Epoch returns the epoch of this instance's tenure as owner, 0 when it does not own the process: a
// number for people (logs, status). Tenure tells tenures apart.
func (r *Repository) Epoch() int64 { return r.epoch }

// Tenure returns the random token of this instance's tenure as owner, 0 when it does not own the process.
// Unlike the epoch it is never handed out twice, so a different tenure from one batch to the next always
// means that another instance owned the process in between.
func (r *Repository) Tenure() int64 { return r.token }

// Holder names the instance that owned the process at the last look at its row, when that was not this
// one; empty when nobody did.
func (r *Repository) Holder() string {
	if r.token != 0 || r.lease.free {
		return ""
	}
	return r.lease.instance
}

// Pooled reports whether the connection goes through a pooler, and transactions whether the pooler was
// seen to pool by transaction (the backend serving the connection changed between transactions).
func (r *Repository) Pooled() (pooled, transactions bool) { return r.pooled, r.movesBackends }

// Locked reports whether the repository holds the cursor row lock.
func (r *Repository) Locked() bool { return r.tx != nil }

// Version returns the row version (its xmin) read when the lock was last taken. A row changed since, by
// this instance's own commits or by an operator, has another: the idle probe watches for that.
func (r *Repository) Version() string { return r.version }

// State returns the position and halt state read when the lock was taken, as changed since by this
// repository.
func (r *Repository) State() inordertype.State { return r.state }

// stateColumns are the columns of a cursor row that scanState reads, in its order.
const stateColumns = `position_created_at, position_id, ` + haltColumns

// haltColumns are the stateColumns after the position.
const haltColumns = `halted_record_id, halted_error, halted_attempts,
	halted_first_failure_at, halted_last_failure_at, paused, halted_permanent, halted_status, halted_next_attempt_at,
	halted_at, redrive_requested_at, halted_unavailable`

// leaseColumns are what a cursor row says of its owner, as scanLease reads them.
const leaseColumns = `owner_epoch, owner_token, coalesce(owner_instance, ''), owner_session,
	coalesce(lease_expires_at <= clock_timestamp(), true), coalesce(lease_expires_at <= clock_timestamp(), false),
	coalesce((extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, 0)`

func scanLease(l *lease) []any {
	return []any{&l.epoch, &l.token, &l.instance, &l.session, &l.free, &l.expired, &leaseMillis{&l.left}}
}

// leaseMillis scans milliseconds into a duration.
type leaseMillis struct{ d *time.Duration }

func (m *leaseMillis) ScanInt64(v pgtype.Int8) error {
	*m.d = time.Duration(v.Int64) * time.Millisecond
	return nil
}

// lockStatement returns the statement that locks the cursor row for a batch, and its arguments after the
// name. Besides the row it sets the transaction's idle_in_transaction_session_timeout and, unless
// SynchronousCommit or Transactional, synchronous_commit = off (SET LOCAL: they hold through any pooler and
// end with the transaction), takes the no-insert lock unless the transaction
// carries a handler's writes, and reads the backend serving it.
func lockStatement(cfg Config, applicationName string) (string, []any) {
	idle := strconv.FormatInt(cfg.idleTimeout().Milliseconds(), 10)
	marks := "set_config('idle_in_transaction_session_timeout', $2, true)"
	if !cfg.SynchronousCommit && !cfg.Transactional {
		marks += " || set_config('synchronous_commit', 'off', true)"
	}
	args := []any{idle}
	if !cfg.Transactional {
		marks += " || pg_advisory_xact_lock_shared($3)::text"
		args = append(args, NoInsertLockKey)
	}
	if cfg.Shared != nil {
		// A connection of the shared pool is named for the process while its transaction holds the row,
		// as a dedicated connection is for its life: a standby ends a stale owner's transaction by it.
		marks += fmt.Sprintf(" || set_config('application_name', $%d, true)", len(args)+2)
		args = append(args, applicationName)
	}
	return `
	SELECT ` + stateColumns + `, xmin::text, ` + leaseColumns + `, pg_backend_pid(), ` + marks + `,
	       position_seq, checkpoint_table, ` + currentTable + `, records_handled, in_flight, in_flight_since
	FROM inorder.cursor
	WHERE process_name = $1
	FOR UPDATE SKIP LOCKED`, args
}

// withoutTransactionTimeout returns the lock statement sql that also sets transaction_timeout = 0 for its
// transaction (SET LOCAL), for a server that has the setting (17 and later; an older server refuses the
// name).
//
// A cursor transaction lasts as long as its batch, handler calls included, by design: a DBA's
// transaction_timeout (on the server, the database or the role) shorter than a batch would end every
// batch before its commit, and with --checkpoint batch redeliver the same records forever. Its own
// bounds are idle_in_transaction_session_timeout, set beside it (a frozen instance's transaction ends),
// the lease (an owner stops working once it can no longer renew) and Config.Timeout on every exchange.
// The server starts the timer at BEGIN and stops it when the setting becomes 0 inside the transaction;
// BEGIN and this statement travel in one round trip, so it runs for microseconds.
//
// The rest of the family is left as the DBA set it, and the processor names the setting when one ends a
// batch (see SettingError): statement_timeout bounds one statement, and inorder's statements are short
// (a DBA's bound below a few milliseconds would stop a crowded pg_locks poll, which the log then says);
// lock_timeout bounds a wait for a lock, and the cursor row is taken with SKIP LOCKED, the rest without
// waiting but for a moment; idle_session_timeout ends a session idle outside a transaction, which
// SET LOCAL cannot reach: a dedicated connection that idles longer reconnects at its next batch, as after
// any cut, and the Shared session pings every 2 s.
func withoutTransactionTimeout(sql string) string {
	const marks = "set_config('idle_in_transaction_session_timeout', $2, true)"
	return strings.Replace(sql, marks, marks+" || set_config('transaction_timeout', '0', true)", 1)
}

// hasTransactionTimeout reports whether the server on conn's other end has transaction_timeout (17 and
// later), from the server_version it reported at start-up: no round trip. A pooler reports the version
// of the server behind it. A version it cannot read counts as older, whose lock statement every version
// takes.
func hasTransactionTimeout(conn *pgx.Conn) bool {
	return serverMajor(conn.PgConn().ParameterStatus("server_version")) >= 17
}

// serverMajor is the major version in a server_version such as "17.10", "18.4 (Debian 18.4-1)" or
// "18beta1"; 0 when there is none.
func serverMajor(v string) int {
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// lockQuery is the lock statement for the repository's current connection: with a shared pool the
// connection changes between transactions, and after a failover the server may be another version.
func (r *Repository) lockQuery() string {
	if hasTransactionTimeout(r.conn) {
		return r.lockSQL17
	}
	return r.lockSQL
}

// ErrForgotten is returned when a process's cursor row is gone while an instance runs it: an operator
// forgot the process (see cursor.Forget), or a failover lost its registration. The instance stops rather
// than register the process anew, which would start it over.
var ErrForgotten = errors.New("the process's cursor row is gone (forgotten by an operator?); not registering it anew")

// ErrFenced is returned when a position write finds that another instance has taken the process: the write
// is refused, so an instance whose lease was taken over can never write a position.
var ErrFenced = errors.New("another instance has taken over the process")

// TryLock locks the cursor row for one batch, taking the process when nobody owns it. It returns false,
// with no error, when another instance owns the process or holds the row: that is the normal state of
// every instance but one.
//
// The owner goes straight to the row lock, which keeps its transactions (and the xid the row lock needs)
// short: BEGIN, the lock and the rider travel in one round trip. When a third of its lease has passed it
// renews the lease and commits at once, in one more round trip, so that the lease other instances read
// is the renewed one. Any other instance first reads the lease without locking anything, and locks the
// row only when the lease has run out or, on a direct connection, the owner's session has ended (it can
// take the owner's advisory lock). An owner whose lease ran out while its session still holds the row (it
// hangs on a dead connection, inside its transaction) has its session ended by the instance that finds
// it so, which then takes over at its next look (see endStale).
func (r *Repository) TryLock(ctx context.Context) (bool, error) {
	if r.released {
		return false, ErrReleased
	}
	if err := r.attach(ctx); err != nil {
		return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
	}
	defer func() {
		if r.tx == nil {
			r.Detach()
		}
	}()
	if r.shared != nil && r.advisory && !r.shared.holds(r.advGen) {
		r.advisory = false // the instance's session was lost, and the lock with it
	}
	if r.tx != nil {
		// Kept from the last batch's commit: still say, once per third of the lease, that the instance is
		// there (status counts it), in the transaction that holds the row.
		if time.Since(r.beat) < r.cfg.lease()/3 {
			return true, nil
		}
		ctx, cancel := r.bounded(ctx)
		defer cancel()
		if err := r.heartbeat(ctx, r.tx); err != nil {
			r.dropTx(ctx)
			return false, err
		}
		r.dirty = true
		return true, nil
	}
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.token == 0 {
		if err := r.heartbeat(ctx, r.conn); err != nil {
			return false, err
		}
		vacant, err := r.vacant(ctx)
		if err != nil || !vacant {
			return false, err
		}
	}
	sent := time.Now()
	ok, err := r.lock(ctx)
	if err == nil && !ok {
		switch err = r.exists(ctx); {
		case err != nil:
		case r.former != 0:
			err = r.endFormer(ctx)
		case r.token == 0 && r.lease.expired:
			err = r.endStale(ctx)
		}
	}
	if err != nil || !ok {
		if r.token == 0 {
			r.giveUpSession(ctx)
		}
		if err != nil {
			return false, fmt.Errorf("lock cursor %q: %w", r.name, pooler.Explain(err))
		}
		return false, nil
	}
	switch l := r.lease; {
	case r.token != 0 && l.token == r.token:
		// Ours. Renew when a third has passed (and say the instance is there, in the same transaction,
		// so that an idle owner commits once per third of its lease), or when the row says this session
		// holds the advisory lock and it does not (a reconnect lost it), or the other way round.
		if l.left < r.cfg.lease()*2/3 || l.session != r.session() || time.Since(r.beat) >= r.cfg.lease()/3 {
			r.beat = time.Time{}
			if err = r.heartbeat(ctx, r.tx); err == nil {
				err = r.renew(ctx, false, sent)
			}
		} else if r.leaseFrom.IsZero() {
			// Owned since before a reconnect: what the row says is what others see.
			r.leaseFrom = sent.Add(l.left - r.cfg.lease())
		}
	case l.free || (l.session && r.session()):
		// Nobody's, or the owner's session has ended: this instance's advisory lock proves it.
		err = r.renew(ctx, true, sent)
	default:
		// Another instance's lease runs: this one lost the process, or looked as it changed hands.
		r.dropTx(ctx)
		r.epoch, r.token, r.leaseFrom = 0, 0, time.Time{}
		r.giveUpSession(ctx)
		return false, nil
	}
	if err != nil {
		r.dropTx(ctx)
		return false, fmt.Errorf("lock cursor %q: %w", r.name, pooler.Explain(err))
	}
	return r.Locked(), nil
}

// renew takes the process (take) or renews this instance's lease, and commits at once, locking the row
// again in the same round trip: the lease other instances read must be the one this instance counts on.
// The repository stays locked unless the row was taken in the instant between the commit and the relock.
func (r *Repository) renew(ctx context.Context, take bool, sent time.Time) error {
	if err := r.claim(ctx, take); err != nil {
		return err
	}
	r.renewing, r.rideNext = sent, true
	_, err := r.commitRelock(ctx, "renew lease of")
	if errors.Is(err, ErrFenced) {
		return nil // taken meanwhile; the repository is unlocked and says so
	}
	return err
}

// lock begins a transaction and locks the row in it, with the rider after the lock, in one round trip
// (two on a new connection, whose first transaction is begun by pgx to get its handle). It reports false
// when the row is held by another transaction (or is not there); the repository is then unlocked.
func (r *Repository) lock(ctx context.Context) (bool, error) {
	b := &pgx.Batch{}
	if r.handle == nil {
		h, err := r.conn.Begin(ctx)
		if err != nil {
			return false, fmt.Errorf("begin: %w", err)
		}
		r.handle = h
	} else {
		b.Queue("BEGIN")
	}
	r.tx = r.handle
	ok, err := r.lockIn(ctx, b, len(b.QueuedQueries))
	if err == nil && ok {
		err = r.readCheckpoint(ctx)
	}
	if err != nil || !ok {
		r.dropTx(ctx)
	} else {
		r.former = 0 // whatever it held, it holds no more
	}
	return ok, err
}

// lockIn queues the lock statement and the rider after the statements already in b (skip of them
// answer no rows), sends the batch, and reads the lock and the rider. It reports whether the row was
// locked; the transaction the batch ends in stays open either way.
func (r *Repository) lockIn(ctx context.Context, b *pgx.Batch, skip int) (bool, error) {
	b.Queue(r.lockQuery(), append([]any{r.name}, r.lockArgs...)...)
	if r.rider != nil {
		b.Queue(r.rider.SQL, r.rider.Args...)
	}
	br := r.conn.SendBatch(ctx, b)
	var err error
	for range skip {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	var ok bool
	if err == nil {
		ok, err = r.scanLock(br.QueryRow())
	}
	if err == nil && ok && r.rider != nil {
		err = r.ride(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return ok, err
}

// ride reads the rider's result from br.
func (r *Repository) ride(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err == nil {
		err = r.rider.ScanFunc(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("rider: %w", err)
	}
	r.rode = true
	return nil
}

// Rider is a statement that travels in every round trip that locks the cursor row, right after the lock
// and in its transaction, so that what a batch needs first (the poll of the transactions in flight) costs
// no round trip of its own.
type Rider struct {
	// SQL and Args are the statement.
	SQL  string
	Args []any
	// ScanFunc reads the statement's rows. It is called only when the row was locked.
	ScanFunc func(pgx.Rows) error
}

// SetRider makes rider travel with every lock of the row by TryLock from now on, and with the relock of
// the next Checkpoint or Commit after RideNext; nil stops it.
func (r *Repository) SetRider(rider *Rider) { r.rider = rider }

// RideNext makes the rider travel with the relock of the next Checkpoint or Commit: the one that ends a
// batch, whose lock the next batch goes on with. The commits within a batch (a position per record) leave
// it out, since its result would not be used.
func (r *Repository) RideNext() { r.rideNext = true }

// TakeRide reports whether the rider ran in the open transaction since the last call: its ScanFunc has
// read the rows, and they are as fresh as the lock.
func (r *Repository) TakeRide() bool {
	rode := r.rode && r.tx != nil
	r.rode = false
	return rode
}

// LeaseLeft is how much of this instance's lease surely remains, as far as this instance knows: from the
// last renewal it committed, measured from when it sent it. Zero when it does not own the process. An
// owner must not start work it cannot finish within it.
func (r *Repository) LeaseLeft() time.Duration {
	if r.token == 0 || r.leaseFrom.IsZero() {
		return 0
	}
	return max(0, time.Until(r.leaseFrom.Add(r.cfg.lease())))
}

// Bounded gives one exchange with the database its deadline (Config.Timeout): the repository's own, and
// those its user makes on its connection (a read, a poll).
func (r *Repository) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return r.bounded(ctx)
}

func (r *Repository) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, r.cfg.timeout(), &UnansweredError{Timeout: r.cfg.timeout()})
}

// UnansweredError is the cause of an exchange cut off by Config.Timeout: the database did not answer
// in time, and the connection counts as dead.
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

// endStale ends the session of an owner whose lease has run out while its transaction still holds the
// cursor row: an instance cut off from the database inside its batch (the server sees it idle in
// transaction, or blocked sending to it) would otherwise keep the row, and the process, until the
// idle-in-transaction timeout or TCP's retransmissions end it. The owner stops delivering before its lease
// runs out (see LeaseLeft), so ending its session takes nothing from a live owner but the time to
// reconnect. Only a session with the owner's application_name that holds a lock on the cursor table is
// ended, and only while the row still names that owner with its lease run out. A role that may not end
// other sessions (pg_signal_backend, or the same role) is told once, and waits for the timeouts.
func (r *Repository) endStale(ctx context.Context) error {
	if r.staleTried {
		return nil
	}
	var ended []int32
	// The CTE is computed first, so that no backend is ended before every condition has held for it.
	rows, err := r.conn.Query(ctx, `
		WITH stale AS MATERIALIZED (
			SELECT a.pid
			FROM inorder.cursor AS c
			JOIN pg_stat_activity AS a
			  ON a.application_name IN (left('inorder:' || c.process_name || '@' || c.owner_instance, 63),
			                            left('inorder-tx:' || c.process_name || '@' || c.owner_instance, 63))
			WHERE c.process_name = $1 AND c.owner_token = $2 AND c.lease_expires_at <= clock_timestamp()
			  AND a.pid <> pg_backend_pid()
			  AND EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.pid = a.pid AND l.locktype = 'relation'
			              AND l.relation = 'inorder.cursor'::regclass AND l.granted))
		SELECT pid FROM stale WHERE pg_terminate_backend(pid)`, r.name, r.lease.token)
	if err == nil {
		ended, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		r.staleTried = true
		return &StaleOwnerError{Instance: r.lease.instance, Err: err}
	}
	if err != nil {
		return fmt.Errorf("end the session of the stale owner %s: %w", r.lease.instance, err)
	}
	if len(ended) > 0 {
		r.ended = Ended{PIDs: ended, Instance: r.lease.instance}
	}
	return nil
}

// endFormer ends this instance's own former session when the row lock is skipped after a reconnect: a
// connection cut off inside a cursor transaction leaves its session idle in transaction on the server,
// holding the row until the idle-in-transaction timeout, while this instance, reconnected, waits for the
// row it holds itself. Only that backend is ended, and only while it has this instance's
// application_name and holds a lock on the cursor table; on a direct connection only (through a pooler a
// backend is no one's).
func (r *Repository) endFormer(ctx context.Context) error {
	former := r.former
	var ended bool
	err := r.conn.QueryRow(ctx, `
		WITH former AS MATERIALIZED (
			SELECT a.pid FROM pg_stat_activity AS a
			WHERE a.pid = $1 AND a.pid <> pg_backend_pid() AND a.application_name = left($2, 63)
			  AND EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.pid = a.pid AND l.locktype = 'relation'
			              AND l.relation = 'inorder.cursor'::regclass AND l.granted))
		SELECT count(*) > 0 FROM former WHERE pg_terminate_backend(pid)`, int32(former), r.ApplicationName()).Scan(&ended)
	if err != nil {
		return fmt.Errorf("end this instance's former session (pid %d): %w", former, err)
	}
	r.former = 0
	if ended {
		r.ended = Ended{PIDs: []int32{int32(former)}, Instance: r.instance(), Own: true}
	}
	return nil
}

// StaleOwnerError says that the session of an owner whose lease ran out still holds the cursor row, and
// this instance may not end it: the process waits for the owner's idle-in-transaction timeout.
type StaleOwnerError struct {
	Instance string
	Err      error
}

func (e *StaleOwnerError) Error() string {
	return fmt.Sprintf("the lease of %s ran out but its session still holds the cursor row, and this role may not "+
		"end it (%v); waiting for its idle-in-transaction timeout", e.Instance, e.Err)
}

func (e *StaleOwnerError) Unwrap() error { return e.Err }

// Ended is a session that held the cursor row for an owner that could no longer use it, and that TryLock
// ended (see endStale and endFormer).
type Ended struct {
	// PIDs are the backends ended.
	PIDs []int32
	// Instance is the owner they served; Own says that it is this instance (its session from before a
	// reconnect).
	Instance string
	Own      bool
}

// EndedSessions returns the sessions TryLock ended since the last call, for the caller to say so; nil
// PIDs when none.
func (r *Repository) EndedSessions() Ended {
	e := r.ended
	r.ended = Ended{}
	return e
}

// trySession reports whether this instance may take the process's advisory lock: on a direct connection,
// when it does not hold it yet.
func (r *Repository) trySession() bool { return !r.pooled && !r.movesBackends && !r.advisory }

// vacant reads the lease without locking anything and reports whether this instance may try to take the
// process: nobody owns it, or its owner's session has ended (this instance could take the advisory lock
// the owner held).
func (r *Repository) vacant(ctx context.Context) (bool, error) {
	var took bool
	err := r.conn.QueryRow(ctx, `
		SELECT `+leaseColumns+`,
		       CASE WHEN $2 AND owner_session AND lease_expires_at > clock_timestamp()
		            THEN pg_try_advisory_lock($3) ELSE false END
		FROM inorder.cursor WHERE process_name = $1`, r.name, r.trySession() && r.shared == nil, LockKey(r.name)).
		Scan(append(scanLease(&r.lease), &took)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("cursor %q: %w", r.name, ErrForgotten)
	}
	if err != nil {
		return false, fmt.Errorf("read lease of cursor %q: %w", r.name, pooler.Explain(err))
	}
	if r.shared != nil && r.trySession() && r.lease.session && !r.lease.free {
		// The instance's session takes the lock, not the connection borrowed for this look.
		var gen uint64
		if took, gen, err = r.shared.tryLock(ctx, LockKey(r.name)); err != nil {
			return false, fmt.Errorf("cursor %q: %w", r.name, err)
		}
		if took {
			r.advGen = gen
		}
	}
	r.advisory = r.advisory || took
	return r.lease.free || r.advisory || (r.token != 0 && r.lease.token == r.token), nil
}

// exists checks, when the row lock was skipped, that the row is there at all.
func (r *Repository) exists(ctx context.Context) error {
	var there bool
	if err := r.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)", r.name).Scan(&there); err != nil {
		return err
	}
	if !there {
		return ErrForgotten
	}
	return nil
}

// claim takes the process (take: a new epoch and token) or renews this instance's lease, inside the
// row-locked transaction, and takes the advisory lock on a direct connection if it can.
func (r *Repository) claim(ctx context.Context, take bool) error {
	epoch, token := r.epoch, r.token
	if take {
		epoch, token = r.lease.epoch+1, newToken()
	}
	session, try := r.session(), r.trySession()
	if r.shared != nil {
		// The instance's session takes the lock; a session that cannot be reached only means that
		// standbys wait out the lease should this instance vanish.
		if try {
			if took, gen, err := r.shared.tryLock(ctx, LockKey(r.name)); err == nil && took {
				r.advisory, r.advGen = true, gen
			}
		}
		session, try = r.session(), false
	}
	err := r.tx.QueryRow(ctx, `
		UPDATE inorder.cursor
		SET owner_epoch = $2, owner_token = $9, owner_instance = $3,
		    lease_expires_at = clock_timestamp() + $4::interval,
		    owner_since = CASE WHEN owner_token = $9 THEN owner_since ELSE clock_timestamp() END,
		    owner_session = $5 OR ($6 AND pg_try_advisory_lock($7))
		WHERE process_name = $1 AND owner_token = $8
		RETURNING owner_session`,
		r.name, epoch, r.instance(), r.cfg.lease(), session, try, LockKey(r.name), r.lease.token, token).
		Scan(&r.advisory)
	if err != nil {
		return err
	}
	r.epoch, r.token, r.dirty = epoch, token, true
	r.lease = lease{epoch: epoch, token: token, instance: r.instance(), session: r.advisory, left: r.cfg.lease()}
	return nil
}

// newToken draws a tenure's token: random, never 0 (which says "no owner").
func newToken() int64 {
	for {
		if t := int64(rand.Uint64()); t != 0 {
			return t
		}
	}
}

// session reports whether this instance holds the process's advisory lock on a session of its own, which
// a standby can rely on: a pooler that turned out to pool by transaction makes its session no one's.
func (r *Repository) session() bool {
	return r.advisory && !r.pooled && !r.movesBackends && (r.shared == nil || r.shared.holds(r.advGen))
}

// giveUpSession releases the advisory lock held by an instance that does not own the process, so that
// only an owner ever holds it (owner_session relies on that).
func (r *Repository) giveUpSession(ctx context.Context) {
	if r.advisory && r.shared != nil {
		_ = r.shared.unlock(ctx, LockKey(r.name), r.advGen) // a session that failed took the lock with it
		r.advisory = false
		return
	}
	if !r.advisory || r.conn == nil || r.conn.IsClosed() {
		return
	}
	if err := unlockSession(ctx, r.conn, LockKey(r.name)); err == nil {
		r.advisory = false
	}
}

func (r *Repository) scanLock(row pgx.Row) (bool, error) {
	var (
		backend        uint32
		marks          string
		rowSeq         int64
		table, current int16
		handled        int64
		flying         int32
		since          pgtype.Timestamptz
	)
	st, ok, err := scanState(row, append(append([]any{&r.version}, scanLease(&r.lease)...), &backend, &marks,
		&rowSeq, &table, &current, &handled, &flying, &since)...)
	if ok && err == nil {
		if r.backend != 0 && backend != r.backend {
			r.movesBackends = true // a transaction pooler: sessions cannot be trusted from now on
		}
		r.backend = backend
		r.current, r.rowHalted = current, st.Halt != nil
		if r.known && r.token != 0 && r.lease.token == r.token && rowSeq == r.durable.rowSeq {
			// Nobody but this owner has written a position since it last looked: its own is the newest.
			st.Position = r.durable.cp.Position
			r.durable.table = table
		} else {
			// The row's position, until readCheckpoint has looked for newer entries.
			r.durable = recorded{cp: checkpoint{Position: st.Position, Handled: handled,
				InFlight: InFlight{Records: int(flying), Since: since.Time}}, rowSeq: rowSeq, table: table}
			r.known = false
		}
		r.open, r.next = r.durable, r.durable.cp
		r.state = st
	}
	return ok, err
}

// scanState reads the stateColumns of a cursor row, then extra.
func scanState(row pgx.Row, extra ...any) (inordertype.State, bool, error) {
	var (
		posAt             pgtype.Timestamptz
		posID, haltID     pgtype.Text
		haltErr           pgtype.Text
		attempts          int32
		first, last, next pgtype.Timestamptz
		haltedAt, redrive pgtype.Timestamptz
		unavailable       pgtype.Text
		paused, permanent bool
		status            pgtype.Int4
	)
	err := row.Scan(append([]any{&posAt, &posID, &haltID, &haltErr, &attempts, &first, &last, &paused,
		&permanent, &status, &next, &haltedAt, &redrive, &unavailable}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return inordertype.State{}, false, nil
	}
	if err != nil {
		return inordertype.State{}, false, err
	}
	st := inordertype.State{Paused: paused, RedriveRequestedAt: redrive.Time}
	if posAt.Valid {
		st.Position = inordertype.Position{CreatedAt: posAt.Time.UTC(), ID: posID.String}
	}
	if haltID.Valid {
		st.Halt = &inordertype.Halt{RecordID: haltID.String, Error: haltErr.String, Attempts: int(attempts),
			FirstFailureAt: first.Time, LastFailureAt: last.Time, Permanent: permanent, Status: int(status.Int32),
			NextAttemptAt: next.Time, HaltedAt: haltedAt.Time, Unavailable: unavailable.String}
	}
	return st, true, nil
}

// SetPosition moves the position, counting handled records; the commit that ends the open transaction
// (Checkpoint, Commit or Unlock) records it, and it is durable once that commits. It clears the halt state,
// since a record past the halted one succeeded, and what is in flight. No statement is sent: a batch that
// moves its position per record in one transaction records only where it ended.
func (r *Repository) SetPosition(ctx context.Context, pos inordertype.Position, handled int) error {
	if r.tx == nil {
		return fmt.Errorf("set position of cursor %q: %w", r.name, ErrNotLocked)
	}
	r.next = checkpoint{Position: pos, Handled: r.next.Handled + int64(handled)}
	r.state = inordertype.State{Position: pos, Paused: r.state.Paused, RedriveRequestedAt: r.state.RedriveRequestedAt}
	return nil
}

// InFlight is what a keyed window has in flight: how many records, and since when the oldest.
type InFlight struct {
	Records int
	Since   time.Time
}

func (f InFlight) args() (any, any) {
	if f.Records == 0 {
		return 0, nil
	}
	return f.Records, f.Since
}

// SetInFlight records what is in flight now; the commit that ends the open transaction records it, as
// SetPosition's position.
func (r *Repository) SetInFlight(ctx context.Context, f InFlight) error {
	if r.tx == nil {
		return fmt.Errorf("set in flight of cursor %q: %w", r.name, ErrNotLocked)
	}
	if f.Records == 0 {
		f = InFlight{}
	}
	r.next.InFlight = f
	return nil
}

// clearHalt is the SET list that clears every column of a failing record's state: a position that moves
// past the record (the processor's or an operator's) clears it with this, and nothing else does.
const clearHalt = `halted_record_id = NULL, halted_error = NULL, halted_attempts = 0,
	    halted_first_failure_at = NULL, halted_last_failure_at = NULL, halted_permanent = false,
	    halted_status = NULL, halted_next_attempt_at = NULL, halted_at = NULL, halted_unavailable = NULL`

// positionArgs are the values a cursor row stores for p (position_created_at, position_id): NULLs for the
// beginning, a NULL id for a time alone.
func positionArgs(p inordertype.Position) [2]any {
	if p.IsBeginning() {
		return [2]any{nil, nil}
	}
	var id any
	if p.ID != "" {
		id = p.ID
	}
	return [2]any{p.CreatedAt, id}
}

// isFenced reports whether err is the refusal of a fenced write that aborts its transaction (appendSQL,
// foldPositionSQL, commitSQL).
func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// pendingWrite returns the statement that records r.next in the open transaction, when it differs from
// what the transaction has recorded: an entry appended to the checkpoint table the row names, or, when the
// row must be rewritten anyway (its halt state cleared, its lease renewed), a fold of the checkpoint into
// the row, which also moves the process to the current table. An owner whose lease is renewed less often
// than the tables turn (a lease longer than the default) folds when its table is the one to be emptied
// next, so that no owner ever holds up the rotation for longer than a turn.
func (r *Repository) pendingWrite() (sql string, args []any, fold, ok bool) {
	if r.next.same(r.open.cp) {
		return "", nil, false, false
	}
	pos := positionArgs(r.next.Position)
	n, since := r.next.InFlight.args()
	renewDue := r.leaseFrom.IsZero() || time.Since(r.leaseFrom) >= r.cfg.lease()/3
	emptiedNext := int(r.open.table) == (int(r.current)+1)%checkpointTables
	if r.rowHalted || renewDue || emptiedNext {
		return foldPositionSQL, []any{r.name, pos[0], pos[1], r.next.Handled, n, since, r.cfg.lease(), r.token}, true, true
	}
	return appendSQL, []any{r.name, pos[0], pos[1], r.next.Handled, n, since, r.token}, false, true
}

// readWrite reads the result of pendingWrite's statement from br and takes in what it recorded.
func (r *Repository) readWrite(br pgx.BatchResults, fold bool, sent time.Time) error {
	if !fold {
		if _, err := br.Exec(); err != nil {
			return err
		}
		r.open.cp = r.next
		return nil
	}
	var one int
	var seq int64
	var table int16
	if err := br.QueryRow().Scan(&one, &seq, &table); err != nil {
		return err
	}
	r.open = recorded{cp: r.next, rowSeq: seq, table: table}
	r.rowHalted, r.renewing = false, sent
	return nil
}

// readCheckpoint reads, in the transaction that holds the row, the newest checkpoint entry newer than the
// row's own position, when the repository does not know that its own is the newest.
func (r *Repository) readCheckpoint(ctx context.Context) error {
	if r.known {
		return nil
	}
	var (
		at      pgtype.Timestamptz
		id      pgtype.Text
		handled int64
		flying  int32
		since   pgtype.Timestamptz
	)
	err := r.tx.QueryRow(ctx, readCheckpointSQL, r.name).Scan(&at, &id, &handled, &flying, &since)
	if err != nil {
		return fmt.Errorf("read the checkpoint of cursor %q: %w", r.name, pooler.Explain(err))
	}
	cp := checkpoint{Handled: handled, InFlight: InFlight{Records: int(flying), Since: since.Time}}
	if at.Valid {
		cp.Position = inordertype.Position{CreatedAt: at.Time.UTC(), ID: id.String}
	}
	r.durable.cp = cp
	r.open, r.next, r.known = r.durable, cp, true
	r.state.Position = cp.Position
	return nil
}

// Checkpoint commits pos now (durable as SynchronousCommit says), counting handled records and recording
// what is in flight, and locks the row again in a new transaction, all in one round trip. It reports false
// when someone else took the row in the instant between the commit and the new lock: an operator action
// (Owner stays true), or another instance that found the lease run out (Owner turns false). The repository
// is then unlocked, and the next TryLock reads what they changed.
func (r *Repository) Checkpoint(ctx context.Context, pos inordertype.Position, handled int, flying InFlight) (bool, error) {
	if r.tx == nil {
		return false, fmt.Errorf("checkpoint cursor %q: %w", r.name, ErrNotLocked)
	}
	if flying.Records == 0 {
		flying = InFlight{}
	}
	r.next = checkpoint{Position: pos, Handled: r.next.Handled + int64(handled), InFlight: flying}
	return r.commitRelock(ctx, "checkpoint")
}

// Commit commits what the open transaction holds now (durable as SynchronousCommit says), counting handled
// records without moving the position (a parked record delivered, and removed, by a redrive), and locks
// the row again, as Checkpoint does; it reports false as Checkpoint does.
func (r *Repository) Commit(ctx context.Context, handled int) (bool, error) {
	if r.tx == nil {
		return false, fmt.Errorf("commit cursor %q: %w", r.name, ErrNotLocked)
	}
	r.next.Handled += int64(handled)
	return r.commitRelock(ctx, "commit")
}

// commitRelock records the checkpoint reached (see pendingWrite), commits, and locks the row again in a
// new transaction with the rider after the lock, all in one round trip.
func (r *Repository) commitRelock(ctx context.Context, what string) (bool, error) {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	sent := time.Now()
	b := &pgx.Batch{}
	write, args, fold, writes := r.pendingWrite()
	if writes {
		b.Queue(write, args...)
	}
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(r.lockQuery(), append([]any{r.name}, r.lockArgs...)...)
	ride := r.rider != nil && r.rideNext
	if ride {
		b.Queue(r.rider.SQL, r.rider.Args...)
	}
	r.rode, r.rideNext = false, false
	br := r.conn.SendBatch(ctx, b)
	var err error
	if writes {
		if err = r.readWrite(br, fold, sent); isFenced(err) {
			err = ErrFenced
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	done := err == nil
	if !done && !errors.Is(err, ErrFenced) {
		// The server may have run the whole round trip, commit included, before the answer was lost: what
		// it holds is read again at the next lock.
		r.known = false
	}
	if done {
		r.durable = r.open
		if !r.renewing.IsZero() {
			r.leaseFrom, r.renewing = r.renewing, time.Time{}
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	var ok bool
	if err == nil {
		ok, err = r.scanLock(br.QueryRow())
	}
	if err == nil && ok && ride {
		err = r.ride(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && ok && r.lease.token == r.token {
		err = r.readCheckpoint(ctx)
	}
	pos := r.durable.cp.Position
	if err != nil {
		r.dropTx(ctx)
		if done {
			r.state = inordertype.State{Position: pos}
		}
		if errors.Is(err, ErrFenced) {
			r.epoch, r.token, r.leaseFrom = 0, 0, time.Time{}
		}
		return false, fmt.Errorf("%s cursor %q: %w", what, r.name, pooler.Explain(err))
	}
	if !ok || r.lease.token != r.token {
		r.dropTx(ctx)
		r.state = inordertype.State{Position: pos}
		if ok { // relocked, but the lease is another's
			r.epoch, r.token, r.leaseFrom = 0, 0, time.Time{}
			r.giveUpSession(ctx)
		}
		return false, nil
	}
	r.dirty = false // committed; the new transaction holds only the lock
	return true, nil
}

// Failure is a failed delivery, as RecordFailure stores it.
type Failure struct {
	// RecordID is the id of the record that failed.
	RecordID string
	// Err is what the handler returned.
	Err error
	// Permanent and Status are as in Halt.
	Permanent bool
	Status    int
	// RetryIn says how long to wait before the next attempt, given the failed attempts so far (this one
	// included).
	RetryIn func(attempts int) time.Duration
	// HaltAfter is how long the record may fail before the stream counts as halted rather than retrying;
	// a permanent failure halts it at once.
	HaltAfter time.Duration
	// Unavailable, when not empty, records the failure as the sink's outage (see Halt.Unavailable): it
	// never halts the stream, whatever Permanent and HaltAfter say.
	Unavailable string
}

// RecordFailure stores the halt state of a failing record in the open transaction, together with the
// position of the last record that succeeded. Attempts count on from the stored state when the same
// record failed before. Unlock makes it durable.
func (r *Repository) RecordFailure(ctx context.Context, pos inordertype.Position, f Failure) (inordertype.Halt, error) {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return inordertype.Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, ErrNotLocked)
	}
	r.next.Position = pos
	args := positionArgs(r.next.Position)
	n, since := r.next.InFlight.args()
	msg := clip(f.Err.Error())
	attempts := 1 // the row is locked, so the state read with the lock is the stored one
	if h := r.state.Halt; h != nil && h.RecordID == f.RecordID {
		attempts = h.Attempts + 1
	}
	status := nullStatus(f.Status)
	var unavailable *string
	if f.Unavailable != "" {
		unavailable = &f.Unavailable
		f.Permanent = false // the sink's, not the record's
	}
	var h inordertype.Halt
	var stored pgtype.Int4
	var haltedAt pgtype.Timestamptz
	var seq int64
	var table int16
	sent := time.Now()
	// The position goes into the row, numbered anew, with the halt state: the checkpoint of the last record
	// that succeeded, which the halt state stands beside.
	err := r.tx.QueryRow(ctx, `
		UPDATE inorder.cursor
		SET position_created_at = $2, position_id = $3, position_seq = nextval('inorder.checkpoint_seq'),
		    records_handled = $14, in_flight = $15, in_flight_since = $16,
		    halted_attempts = $6,
		    halted_first_failure_at = CASE WHEN halted_record_id = $4 THEN halted_first_failure_at
		                                   ELSE clock_timestamp() END,
		    halted_last_failure_at = clock_timestamp(),
		    halted_next_attempt_at = clock_timestamp() + $7::interval,
		    halted_record_id = $4,
		    halted_error = $5,
		    halted_permanent = $8,
		    halted_status = $9,
		    halted_unavailable = $13::text,
		    halted_at = CASE
		        WHEN $13::text IS NOT NULL THEN NULL
		        WHEN halted_record_id = $4 AND halted_at IS NOT NULL THEN halted_at
		        WHEN $8 OR (halted_record_id = $4 AND clock_timestamp() - halted_first_failure_at >= $10::interval)
		          THEN clock_timestamp()
		        END,
		    lease_expires_at = clock_timestamp() + $11::interval
		WHERE process_name = $1 AND owner_token = $12
		RETURNING halted_first_failure_at, halted_last_failure_at, halted_next_attempt_at, halted_status, halted_at,
		          position_seq, checkpoint_table`,
		r.name, args[0], args[1], f.RecordID, msg, attempts, f.RetryIn(attempts), f.Permanent, status, f.HaltAfter,
		r.cfg.lease(), r.token, unavailable, r.next.Handled, n, since).
		Scan(&h.FirstFailureAt, &h.LastFailureAt, &h.NextAttemptAt, &stored, &haltedAt, &seq, &table)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrFenced
	}
	if err != nil {
		return inordertype.Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, err)
	}
	h.RecordID, h.Error, h.Attempts, h.Permanent, h.Status = f.RecordID, msg, attempts, f.Permanent, int(stored.Int32)
	h.Unavailable = f.Unavailable
	h.HaltedAt = haltedAt.Time
	r.state = inordertype.State{Position: pos, Halt: &h, Paused: r.state.Paused, RedriveRequestedAt: r.state.RedriveRequestedAt}
	r.open = recorded{cp: r.next, rowSeq: seq, table: table}
	r.rowHalted = true
	r.dirty, r.renewing = true, sent
	return h, nil
}

// SetSource records which table and columns the process reads (Table qualified), so status can measure
// what is behind.
func (r *Repository) SetSource(ctx context.Context, src inordertype.Source) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return fmt.Errorf("set source of cursor %q: %w", r.name, ErrNotLocked)
	}
	var part, parts any
	if src.Partition != nil {
		part, parts = src.Partition.Index, src.Partition.Count
	}
	tag, err := r.tx.Exec(ctx, `
		UPDATE inorder.cursor SET source_table = $2, source_id_column = $3, source_created_at_column = $4,
		       source_key_column = $5, source_partition = $6, source_partitions = $7
		WHERE process_name = $1 AND (source_table, source_id_column, source_created_at_column, source_key_column,
		      source_partition, source_partitions) IS DISTINCT FROM ($2, $3, $4, $5, $6::int, $7::int)`,
		r.name, src.Table, src.IDColumn, src.CreatedAtColumn, src.KeyColumn, part, parts)
	if err != nil {
		return fmt.Errorf("set source of cursor %q: %w", r.name, err)
	}
	r.dirty = r.dirty || tag.RowsAffected() > 0
	return nil
}

// SetHold records which open transaction holds the stream's horizon back, by its backend pid (0 for a
// prepared transaction) and since when; a zero since clears it.
func (r *Repository) SetHold(ctx context.Context, pid int, since time.Time) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return fmt.Errorf("set hold of cursor %q: %w", r.name, ErrNotLocked)
	}
	var p, s any
	if !since.IsZero() {
		p, s = pid, since
	}
	tag, err := r.tx.Exec(ctx, `
		UPDATE inorder.cursor SET held_by_pid = $2, held_since = $3
		WHERE process_name = $1 AND (held_by_pid, held_since) IS DISTINCT FROM ($2, $3)`, r.name, p, s)
	if err != nil {
		return fmt.Errorf("set hold of cursor %q: %w", r.name, err)
	}
	r.dirty = r.dirty || tag.RowsAffected() > 0
	return nil
}

// Unlock commits the open transaction, which makes the position durable and releases the row for other
// instances. It is a no-op when the cursor is not locked. A transaction that changed nothing (an empty
// poll) is rolled back instead: the row lock gave it a transaction id, and committing it would wait for a
// WAL flush, once per poll, for nothing.
func (r *Repository) Unlock(ctx context.Context) error {
	if r.tx == nil {
		return nil
	}
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	defer r.Detach()
	sent := time.Now()
	write, args, fold, writes := r.pendingWrite()
	dirty := r.dirty || writes
	r.tx, r.dirty, r.rode = nil, false, false
	if !dirty {
		if _, err := r.conn.Exec(ctx, "ROLLBACK"); err != nil {
			r.closeConn()
			return fmt.Errorf("unlock cursor %q: %w", r.name, err)
		}
		return nil
	}
	b := &pgx.Batch{}
	if writes {
		b.Queue(write, args...)
	}
	b.Queue("COMMIT")
	br := r.conn.SendBatch(ctx, b)
	var err error
	if writes {
		if err = r.readWrite(br, fold, sent); isFenced(err) {
			err = ErrFenced
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.renewing, r.known = time.Time{}, false
		r.open, r.next = r.durable, r.durable.cp
		if errors.Is(err, ErrFenced) {
			r.epoch, r.token, r.leaseFrom = 0, 0, time.Time{}
		}
		r.closeConn()
		return fmt.Errorf("unlock cursor %q: %w", r.name, err)
	}
	r.durable = r.open
	if !r.renewing.IsZero() {
		r.leaseFrom, r.renewing = r.renewing, time.Time{}
	}
	return nil
}

// Abort rolls the open transaction back, dropping every change since the last durable position, and
// releases the row. It is a no-op when the cursor is not locked.
func (r *Repository) Abort(ctx context.Context) error {
	if r.tx == nil {
		return nil
	}
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	defer r.Detach()
	r.tx, r.dirty, r.rode, r.renewing = nil, false, false, time.Time{}
	r.open, r.next = r.durable, r.durable.cp
	if r.conn.IsClosed() {
		return nil
	}
	if _, err := r.conn.Exec(ctx, "ROLLBACK"); err != nil {
		r.closeConn()
		return fmt.Errorf("abort cursor %q: %w", r.name, err)
	}
	return nil
}

func (r *Repository) dropTx(ctx context.Context) {
	if r.tx != nil {
		r.tx, r.dirty, r.rode, r.renewing = nil, false, false, time.Time{}
		r.open, r.next = r.durable, r.durable.cp
		if !r.conn.IsClosed() {
			if _, err := r.conn.Exec(ctx, "ROLLBACK"); err != nil {
				r.closeConn()
			}
		}
	}
}

// closeConn closes the connection after a COMMIT or ROLLBACK that could not be sent or answered: its
// transaction may still be open on the server, holding the row (and, with it, statements run next in it
// would not count), so the session goes, and the next exchange reconnects (see Broken).
func (r *Repository) closeConn() {
	if r.conn == nil || r.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.conn.Close(ctx)
}

// Broken reports whether the connection is gone, so that the caller should Reconnect rather than give up.
func (r *Repository) Broken(err error) bool {
	if r.shared != nil {
		return (r.conn != nil && r.conn.IsClosed()) || IsConnectionError(err)
	}
	if r.conn == nil || r.conn.IsClosed() {
		return true
	}
	return IsConnectionError(err)
}

// Reconnect drops the current connection (and with it any lock) and opens a new one. The lease stays: if
// nobody took the process meanwhile, this instance goes on owning it. It does not register the process
// again: a row gone while the instance ran is reported by the next TryLock (ErrForgotten).
func (r *Repository) Reconnect(ctx context.Context) error {
	if r.released {
		return ErrReleased
	}
	r.tx = nil
	if r.backend != 0 && !r.pooled {
		r.former = r.backend
	}
	if r.shared != nil {
		// The pool's other connections most likely went the same way (a server restart, a failover): the
		// idle ones are closed, and those lent out are not lent again.
		r.closeConn()
		r.Detach()
		r.shared.pool.Reset()
		if err := r.connect(ctx); err != nil {
			return err
		}
		pctx, cancel := r.bounded(ctx)
		defer cancel()
		if err := r.conn.Ping(pctx); err != nil {
			r.closeConn()
			r.Detach()
			return fmt.Errorf("reconnect cursor %q: %w", r.name, err)
		}
		return nil
	}
	if r.conn != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = r.conn.Close(closeCtx)
		cancel()
	}
	return r.connect(ctx)
}

// Release ends the open transaction (committing it), gives up ownership, closes the connection and
// removes the repository from its store. Opening the name again afterwards makes a new repository.
func (r *Repository) Release(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	err := r.Unlock(ctx)
	if r.shared != nil && (r.token != 0 || !r.beat.IsZero()) {
		if aerr := r.attach(ctx); aerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, aerr)
		}
	}
	if r.token != 0 && r.conn != nil && !r.conn.IsClosed() {
		// Give up the lease now, so a standby takes over at once rather than when it runs out. The write is
		// named for the process (SET LOCAL, for its own statement's transaction), as every write of the row
		// is, whichever connection makes it. The position as it stands goes into the row with it (a fold), so
		// that the row alone says where the process stands: an instance of the version before the checkpoint
		// log reads only the row.
		if _, uerr := r.conn.Exec(ctx, `
			WITH named AS (SELECT set_config('application_name', $3, true))
			UPDATE inorder.cursor AS c
			SET lease_expires_at = NULL, owner_session = false, `+foldSet+`
			FROM named, inorder.position AS p
			WHERE c.process_name = $1 AND c.owner_token = $2 AND p.process_name = c.process_name`,
			r.name, r.token, r.ApplicationName()); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
		r.epoch, r.token = 0, 0
	}
	if r.advisory && r.shared != nil {
		r.giveUpSession(ctx)
	}
	if r.advisory && r.conn != nil && !r.conn.IsClosed() {
		if uerr := unlockSession(ctx, r.conn, LockKey(r.name)); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
		r.advisory = false
	}
	if !r.beat.IsZero() && r.conn != nil && !r.conn.IsClosed() {
		if _, uerr := r.conn.Exec(ctx, "DELETE FROM inorder.instance WHERE process_name = $1 AND instance = $2",
			r.name, r.instance()); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
	}
	r.store.forget(r)
	r.Unclaim()
	if r.shared != nil {
		r.Detach()
	}
	r.mu.Lock()
	r.released = true
	conn := r.conn
	r.mu.Unlock()
	if conn != nil && r.shared == nil {
		if cerr := conn.Close(ctx); err == nil && cerr != nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, cerr)
		}
	}
	return err
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
