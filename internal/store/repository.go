package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

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
// a connection of its own, since the row lock lives in a transaction on that connection. Its methods, and
// its parts', are meant for one goroutine at a time, the processor that Claims it.
//
// Its work is done by its parts, each of which owns what it needs: Session the connection and the
// transaction open on it, Lease the process's ownership, Lock the row lock of a batch and its commits,
// Position the checkpoint and the row's state, Registration the row's existence, Source what the process
// reads and waits for, Parking the parked records. Open sets them; they share the Session (and Lock the
// others) by pointer.
type Repository struct {
	name  string
	key   string // in its store
	cfg   Config
	store *Store
	// claimed says that a user works the repository (see Claim); guarded by the Session's mu, with its
	// released.
	claimed bool

	// Session is the repository's connection and the transaction open on it.
	Session *Session
	// Lease is the process's ownership: this instance's tenure and its lease.
	Lease *Lease
	// Lock is the cursor row lock that a batch works under, and the commits that record its position.
	Lock *Lock
	// Position is the process's checkpoint and the row's state as the lock read it.
	Position *Position
	// Registration is the process's cursor row: registering it, and removing it while nothing used it.
	Registration *Registration
	// Source records what the process reads, what it waits for and what it found late.
	Source *Source
	// Parking is the process's parked records and their redrives.
	Parking *Parking
}

// newRepository returns the repository of process name (key in its store), with its parts, working on
// cfg.Shared (own, when those connections are the repository's own).
func newRepository(name, key string, cfg Config, s *Store, own *Shared) *Repository {
	sess := &Session{name: name, cfg: cfg, shared: cfg.Shared, own: own}
	owner := &Lease{name: name, cfg: cfg, sess: sess}
	pos := &Position{name: name, cfg: cfg, sess: sess, owner: owner}
	lock := &Lock{name: name, cfg: cfg, sess: sess, owner: owner, pos: pos}
	lock.lockSQL, lock.lockArgs = lockStatement(cfg, applicationName(name, cfg))
	lock.lockSQL17 = withoutTransactionTimeout(lock.lockSQL)
	return &Repository{name: name, key: key, cfg: cfg, store: s, Session: sess, Lease: owner, Lock: lock, Position: pos,
		Registration: &Registration{name: name, cfg: cfg, sess: sess},
		Source:       &Source{name: name, sess: sess},
		Parking:      &Parking{name: name, sess: sess, pos: pos}}
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
	r.Session.mu.Lock()
	defer r.Session.mu.Unlock()
	if r.Session.released {
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
	r.Session.mu.Lock()
	r.claimed = false
	r.Session.mu.Unlock()
}

// ApplicationName is the application_name of the repository's connection: "inorder:<process>@<instance>",
// or "inorder-tx:<process>@<instance>" when Config.Transactional is set. Status counts the sessions of a
// process's instances by it.
func (r *Repository) ApplicationName() string { return applicationName(r.name, r.cfg) }

// applicationName is the application_name of process name's connection as cfg says (see ApplicationName).
func applicationName(name string, cfg Config) string {
	prefix := "inorder:"
	if cfg.Transactional {
		prefix = "inorder-tx:"
	}
	return prefix + name + "@" + instanceName(cfg)
}

// instanceName is the instance's name: cfg.Instance, or "<hostname>:<pid>".
func instanceName(cfg Config) string {
	if cfg.Instance != "" {
		return cfg.Instance
	}
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}

// Release ends the open transaction (committing it), gives up ownership, closes the connection and
// removes the repository from its store. Opening the name again afterwards makes a new repository.
func (r *Repository) Release(ctx context.Context) error {
	ctx, cancel := r.Session.bounded(ctx)
	defer cancel()
	err := r.Lock.Unlock(ctx)
	if r.Lease.token != 0 || !r.Lease.beat.IsZero() {
		if aerr := r.Session.attach(ctx); aerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, aerr)
		}
	}
	if r.Lease.token != 0 && r.Session.conn != nil && !r.Session.conn.IsClosed() {
		// Give up the lease now, so a standby takes over at once rather than when it runs out.
		if uerr := r.Lease.giveUpLease(ctx); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
		r.Lease.epoch, r.Lease.token = 0, 0
	}
	r.Lease.giveUpSession(ctx)
	if !r.Lease.beat.IsZero() && r.Session.conn != nil && !r.Session.conn.IsClosed() {
		if _, uerr := r.Session.conn.Exec(ctx, "DELETE FROM inorder.instance WHERE process_name = $1 AND instance = $2",
			r.name, instanceName(r.cfg)); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
	}
	r.store.forget(r)
	r.Unclaim()
	r.Session.letGo()
	r.Session.mu.Lock()
	r.Session.released = true
	r.Session.mu.Unlock()
	r.Session.closeOwn()
	return err
}
