package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/dial"
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
	// ConnConfig is the database connection configuration. Without Shared the repository gets shared
	// connections of its own made from it (a session and one to work on). Required without Shared.
	ConnConfig *pgx.ConnConfig
	// BeforeConnect, when set, is given a copy of ConnConfig before each connection (see
	// dial.BeforeConnectFunc). With Shared, the Shared's is used.
	BeforeConnect dial.BeforeConnectFunc

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
	// a commit, and the connection's start-up. An exchange that receives nothing for this long ends the
	// connection, which then counts as dead (see Broken): a connection that a NAT or a load balancer forgot
	// never errors by itself. An answer that keeps arriving, however slowly (big rows on a slow link), is
	// not cut off (see Bounded). Zero means dial.DefaultTimeout.
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
	own    *Shared // shared when the repository's own (opened without Config.Shared): closed with it
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
	// slot is the slot the lock of the open transaction found current, and lockedAt when its answer came
	// (see appendSlot).
	slot      int
	lockedAt  time.Time
	rowHalted bool
	claimed   bool
	released  bool
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
	// Taking a free process (see fleet.go): not before notBefore (this instance handed it over), and only
	// once it has been seen free since freeSince for deferFor, which takeAfter decided at that first sight.
	notBefore, freeSince time.Time
	deferFor             time.Duration
	takeAfter            func(context.Context) time.Duration
}

// Name returns the process name the repository was opened for. No method takes a name: a repository can
// only ever touch its own row.
func (r *Repository) Name() string { return r.name }

// Claim marks the repository as worked by one user (a processor) until Unclaim. A second Claim fails with
// ErrInUse, so two processors of one store (one Client) cannot share a cursor by mistake. Processors of
// different stores are different instances to each other when their instance names differ; with the
// same name (two Clients of one program, both left to the default "<hostname>:<pid>"), they share the
// instance's row in inorder.instance: give each Client its own Config.Instance.
func (r *Repository) Claim() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return ErrReleased
	}
	if r.claimed {
		return fmt.Errorf("cursor %q: %w", r.name, ErrInUse)
	}
	r.claimed = true
	return nil
}

// Unclaim ends a Claim.
func (r *Repository) Unclaim() {
	r.mu.Lock()
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
