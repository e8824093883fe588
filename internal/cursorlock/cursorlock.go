// Package cursorlock is the locking protocol of a process's cursor row, which a processor drives: a
// dedicated connection, ownership through a session-level advisory lock, the row locked FOR UPDATE SKIP
// LOCKED in one short transaction per batch, and the position, halt and hold written inside it. Package
// cursor is what users and operators see of the same row.
//
// # Ownership
//
// Any number of instances may run a process; one works it at a time. An instance becomes the owner by
// taking a session-level advisory lock keyed by the process name, and keeps it between batches, so the
// work does not hop between instances while they idle. Each batch then locks the process's row in
// inorder.cursor with SELECT ... FOR UPDATE SKIP LOCKED in a short transaction; position updates happen
// in that transaction, so an instance that lost its session can never record a position. The connection
// sets idle_in_transaction_session_timeout, idle_session_timeout and TCP keepalives, so a frozen or
// vanished owner loses the process and a standby takes over.
//
// # One repository per process and instance
//
// Open hands out one Repository per database, process name and instance name: asking twice gives the
// same one, and no method takes a name, so a repository can only touch its own row.
package cursorlock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/internal/source"
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
	// ConnConfig is the database connection configuration. The repository copies it and adds its own
	// session settings; it opens one dedicated connection from it. Required.
	ConnConfig *pgx.ConnConfig

	// IdleInTransactionTimeout is set as the connection's idle_in_transaction_session_timeout. When an
	// instance freezes while holding the cursor, Postgres ends its session after this long and another
	// instance takes over. A handler call must finish well within it. Zero means 60 seconds.
	IdleInTransactionTimeout time.Duration

	// IdleSessionTimeout is set as the connection's idle_session_timeout. An instance holds its process
	// between batches through a session-level advisory lock; if it freezes outside a transaction,
	// Postgres ends its session after this long and another instance takes over. It must be longer than
	// any pause of a live processor between statements (its poll interval and longest retry backoff).
	// Zero means twice IdleInTransactionTimeout.
	IdleSessionTimeout time.Duration

	// StartFromNow registers an unknown process after every row created before the moment of
	// registration; false registers it before every row.
	StartFromNow bool

	// Instance names this instance in application_name, so that status can say who holds a cursor.
	// Empty means "<hostname>:<pid>".
	Instance string

	// Transactional says that the cursor transaction also carries the handler's own writes (a
	// transactional handler). The session is then named "inorder-tx:…" instead of "inorder:…", so that
	// processors reading a table those writes may reach wait for its transactions (see the horizon).
	Transactional bool
}

func (c *Config) idleTimeout() time.Duration {
	if c.IdleInTransactionTimeout <= 0 {
		return 60 * time.Second
	}
	return c.IdleInTransactionTimeout
}

// Halt is a stream stopped on a failing record, as stored in its cursor row; cursor.Halt documents the
// fields and converts from it.
type Halt struct {
	RecordID       string
	Error          string
	Permanent      bool
	Status         int
	Attempts       int
	FirstFailureAt time.Time
	LastFailureAt  time.Time
	NextAttemptAt  time.Time
	HaltedAt       time.Time
}

// State is what a locked cursor row holds; cursor.State is its public form.
type State struct {
	Position source.Position
	// Halt is nil when the stream is not halted.
	Halt *Halt
	// Paused is set by an operator and stops the process at its next batch until resumed.
	Paused bool
}

// registry hands out one Repository per database, process name and instance name.
type registry struct {
	mu    sync.Mutex
	repos map[string]*Repository
}

var repos = &registry{}

// Open returns the repository for process name on cfg's database as instance cfg.Instance, connecting and
// registering the process on first use. Asking again for the same returns the same repository (cfg is
// then ignored), so two parts of one program can never hold two locks, or two connections, for one
// cursor as one instance. Instances with other names are other instances, as in other programs.
func Open(ctx context.Context, name string, cfg Config) (*Repository, error) {
	return repos.open(ctx, name, cfg)
}

func (r *registry) open(ctx context.Context, name string, cfg Config) (*Repository, error) {
	if name == "" {
		return nil, errors.New("cursor: process name is empty")
	}
	if cfg.ConnConfig == nil {
		return nil, fmt.Errorf("open cursor %q: Config.ConnConfig is required", name)
	}
	key := fmt.Sprintf("%s:%d/%s/%s\x00%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, name, cfg.Instance)
	r.mu.Lock()
	defer r.mu.Unlock()
	if repo, ok := r.repos[key]; ok {
		return repo, nil
	}
	repo := &Repository{name: name, key: key, cfg: cfg, registry: r}
	if err := repo.connect(ctx); err != nil {
		return nil, err
	}
	if err := repo.register(ctx); err != nil {
		repo.conn.Close(ctx)
		return nil, err
	}
	if r.repos == nil {
		r.repos = map[string]*Repository{}
	}
	r.repos[key] = repo
	return repo, nil
}

// Repository owns the cursor row of one process: its lock, its position and its halt state. It works on
// a connection of its own, since the row lock lives in a transaction on that connection. Its methods are
// meant for one goroutine at a time, the processor that Claims it.
type Repository struct {
	name     string
	key      string // in the registry
	cfg      Config
	registry *registry

	mu       sync.Mutex // guards conn swaps against Close from another goroutine
	conn     *pgx.Conn
	owner    bool // this session holds the process's advisory lock
	dirty    bool // the open transaction changed the cursor row
	tx       pgx.Tx
	state    State
	version  string   // the row's xmin when it was last locked
	inFlight InFlight // as the row holds it
	claimed  bool
	released bool
	// registered says this repository created the row (rather than finding it), so that Unregister
	// may remove it while nothing has used it.
	registered bool
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
// or "inorder-tx:<process>@<instance>" when Config.Transactional is set. Status looks it up in
// pg_stat_activity to say which instance holds a cursor.
func (r *Repository) ApplicationName() string {
	inst := r.cfg.Instance
	if inst == "" {
		host, _ := os.Hostname()
		inst = host + ":" + strconv.Itoa(os.Getpid())
	}
	prefix := "inorder:"
	if r.cfg.Transactional {
		prefix = "inorder-tx:"
	}
	return prefix + r.name + "@" + inst
}

func (r *Repository) connect(ctx context.Context) error {
	cc := r.cfg.ConnConfig.Copy()
	const keepAlive = 10 * time.Second // a vanished peer is noticed without the system's default of hours
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	idleSession := r.cfg.IdleSessionTimeout
	if idleSession <= 0 {
		idleSession = 2 * r.cfg.idleTimeout()
	}
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(r.cfg.idleTimeout().Milliseconds(), 10)
	cc.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(idleSession.Milliseconds(), 10)
	cc.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(int(keepAlive.Seconds()))
	cc.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(max(1, int(keepAlive.Seconds())/3))
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	cc.RuntimeParams["application_name"] = r.ApplicationName()
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAlive, Interval: max(time.Second, keepAlive/3), Count: 3,
		},
	}
	cc.DialFunc = dialer.DialContext
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect cursor %q: %w", r.name, err)
	}
	r.mu.Lock()
	r.conn, r.tx, r.owner, r.dirty = conn, nil, false, false
	r.inFlight = InFlight{Records: -1} // unknown: the first SetInFlight writes
	r.mu.Unlock()
	return nil
}

// LockKey is the key of the session-level advisory lock that makes an instance the owner of process name
// between batches: 64 bits of a SHA-256 of the name, so distinct names practically never share a key.
// pg_locks shows it as classid = key>>32, objid = key&0xffffffff, objsubid = 1.
func LockKey(name string) int64 {
	sum := sha256.Sum256([]byte("inorder.cursor:" + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

func (r *Repository) register(ctx context.Context) error {
	tag, err := r.conn.Exec(ctx, `
		INSERT INTO inorder.cursor (process_name, position_created_at)
		VALUES ($1, CASE WHEN $2 THEN clock_timestamp() END)
		ON CONFLICT (process_name) DO NOTHING`, r.name, r.cfg.StartFromNow)
	if err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, err)
	}
	r.registered = r.registered || tag.RowsAffected() == 1
	return nil
}

// Unregister deletes the cursor row this repository created, when nothing has used it since: no instance
// has locked it to work (which records the source), nor moved, paused or halted it, and no other instance
// of the process is connected. A processor whose start-up checks fail calls it, so that a wrong column or a
// missing index leaves no process behind for status to show. It does nothing otherwise.
func (r *Repository) Unregister(ctx context.Context) error {
	if !r.registered || r.conn == nil || r.conn.IsClosed() || r.tx != nil {
		return nil
	}
	_, err := r.conn.Exec(ctx, `
		DELETE FROM inorder.cursor c
		WHERE process_name = $1 AND source_table IS NULL AND records_handled = 0 AND NOT paused
		  AND halted_record_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM inorder.audit a WHERE a.process_name = c.process_name)
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity
		                  WHERE pid <> pg_backend_pid() AND datname = current_database()
		                    AND (application_name LIKE 'inorder:' || $1 || '@%'
		                         OR application_name LIKE 'inorder-tx:' || $1 || '@%'))`, r.name)
	if err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	r.registered = false
	return nil
}

// Conn returns the repository's dedicated connection. While the cursor is locked, statements on it run
// inside the lock-holding transaction.
func (r *Repository) Conn() *pgx.Conn { return r.conn }

// Tx returns the transaction that holds the cursor row lock, or nil when the cursor is not locked. A
// TxHandler's writes go through it so that they commit with the position.
func (r *Repository) Tx() pgx.Tx { return r.tx }

// Owner reports whether this instance owns the process (holds its advisory lock). TryLock returning false
// while Owner is true means the row itself is held for a moment by someone else: an operator action.
func (r *Repository) Owner() bool { return r.owner }

// Locked reports whether the repository holds the cursor row lock.
func (r *Repository) Locked() bool { return r.tx != nil }

// Version returns the row version (its xmin) read when the lock was last taken. A row changed since, by
// this instance's own commits or by an operator, has another: the idle probe watches for that.
func (r *Repository) Version() string { return r.version }

// State returns the position and halt state read when the lock was taken, as changed since by this
// repository.
func (r *Repository) State() State { return r.state }

// StateColumns are the columns of a cursor row that ScanState reads, in its order.
const StateColumns = `position_created_at, position_id, halted_record_id, halted_error, halted_attempts,
	halted_first_failure_at, halted_last_failure_at, paused, halted_permanent, halted_status, halted_next_attempt_at,
	halted_at`

const lockSQL = `
	SELECT ` + StateColumns + `, xmin::text
	FROM inorder.cursor
	WHERE process_name = $1
	FOR UPDATE SKIP LOCKED`

// TryLock makes this instance the process's owner and locks the cursor row for one batch. It returns
// false, with no error, when another instance owns the process or holds the row: that is the normal state
// of every instance but one.
//
// Ownership is a session-level advisory lock, taken once and kept between batches, so the owner does not
// lose the process to a standby each time it unlocks the row while idle. The row itself is locked with
// FOR UPDATE SKIP LOCKED in a transaction per batch, which keeps transactions (and the xid the row lock
// needs) short, and is what operator actions wait on.
func (r *Repository) TryLock(ctx context.Context) (bool, error) {
	if r.released {
		return false, ErrReleased
	}
	if r.tx != nil {
		return true, nil
	}
	if !r.owner {
		if err := r.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LockKey(r.name)).Scan(&r.owner); err != nil {
			return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
		}
		if !r.owner {
			return false, nil
		}
		r.inFlight = InFlight{Records: -1} // what a previous owner left there is unknown
	}
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("lock cursor %q: begin: %w", r.name, err)
	}
	ok, err := r.scanLock(tx.QueryRow(ctx, lockSQL, r.name))
	if err != nil || !ok {
		_ = tx.Rollback(ctx)
		if err != nil {
			return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
		}
		return false, nil
	}
	r.tx = tx
	return true, nil
}

func (r *Repository) scanLock(row pgx.Row) (bool, error) {
	st, ok, err := ScanState(row, &r.version)
	if ok {
		r.state = st
	}
	return ok, err
}

// ScanState reads the StateColumns of a cursor row, then extra.
func ScanState(row pgx.Row, extra ...any) (State, bool, error) {
	var (
		posAt             pgtype.Timestamptz
		posID, haltID     pgtype.Text
		haltErr           pgtype.Text
		attempts          int32
		first, last, next pgtype.Timestamptz
		haltedAt          pgtype.Timestamptz
		paused, permanent bool
		status            pgtype.Int4
	)
	err := row.Scan(append([]any{&posAt, &posID, &haltID, &haltErr, &attempts, &first, &last, &paused,
		&permanent, &status, &next, &haltedAt}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	st := State{Paused: paused}
	if posAt.Valid {
		st.Position = source.Position{CreatedAt: posAt.Time.UTC(), ID: posID.String}
	}
	if haltID.Valid {
		st.Halt = &Halt{RecordID: haltID.String, Error: haltErr.String, Attempts: int(attempts),
			FirstFailureAt: first.Time, LastFailureAt: last.Time, Permanent: permanent, Status: int(status.Int32),
			NextAttemptAt: next.Time, HaltedAt: haltedAt.Time}
	}
	return st, true, nil
}

// SetPosition moves the position inside the open transaction, counting handled records; it becomes
// durable when the transaction commits (Unlock or Checkpoint). It clears the halt state, since a record
// past the halted one succeeded.
func (r *Repository) SetPosition(ctx context.Context, pos source.Position, handled int) error {
	if r.tx == nil {
		return fmt.Errorf("set position of cursor %q: %w", r.name, ErrNotLocked)
	}
	args := pos.Args()
	if _, err := r.tx.Exec(ctx, setPositionSQL, r.name, args[0], args[1], handled, 0, nil); err != nil {
		return fmt.Errorf("set position of cursor %q: %w", r.name, err)
	}
	r.dirty, r.inFlight = true, InFlight{}
	r.state = State{Position: pos, Paused: r.state.Paused}
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

// SetInFlight records what is in flight now, inside the open transaction, when it differs from what the
// row holds.
func (r *Repository) SetInFlight(ctx context.Context, f InFlight) error {
	if r.tx == nil {
		return fmt.Errorf("set in flight of cursor %q: %w", r.name, ErrNotLocked)
	}
	if f == r.inFlight {
		return nil
	}
	n, since := f.args()
	if _, err := r.tx.Exec(ctx, "UPDATE inorder.cursor SET in_flight = $2, in_flight_since = $3 WHERE process_name = $1",
		r.name, n, since); err != nil {
		return fmt.Errorf("set in flight of cursor %q: %w", r.name, err)
	}
	r.dirty, r.inFlight = true, f
	return nil
}

// setPositionSQL moves the position, clears the halt state, counts $4 handled records and records what
// is in flight ($5, $6); once a minute it starts a new throughput window with the count so far.
const setPositionSQL = `
	UPDATE inorder.cursor
	SET position_created_at = $2, position_id = $3,
	    halted_record_id = NULL, halted_error = NULL, halted_attempts = 0,
	    halted_first_failure_at = NULL, halted_last_failure_at = NULL,
	    halted_permanent = false, halted_status = NULL, halted_next_attempt_at = NULL, halted_at = NULL,
	    updated_at = clock_timestamp(),
	    in_flight = $5, in_flight_since = $6,
	    records_handled = records_handled + $4,
	    window_records = CASE WHEN clock_timestamp() - window_started_at >= interval '1 minute'
	                          THEN records_handled ELSE window_records END,
	    window_started_at = CASE WHEN clock_timestamp() - window_started_at >= interval '1 minute'
	                             THEN clock_timestamp() ELSE window_started_at END
	WHERE process_name = $1`

// Checkpoint makes pos durable now, counting handled records and recording what is in flight: it updates the row, commits, and locks the
// row again in a new transaction, all in one round trip. It reports false when someone else (an operator
// action) took the row in the instant between the commit and the new lock; the repository is then
// unlocked, and the next TryLock reads what they changed.
func (r *Repository) Checkpoint(ctx context.Context, pos source.Position, handled int, flying InFlight) (bool, error) {
	if r.tx == nil {
		return false, fmt.Errorf("checkpoint cursor %q: %w", r.name, ErrNotLocked)
	}
	args := pos.Args()
	n, since := flying.args()
	b := &pgx.Batch{}
	b.Queue(setPositionSQL, r.name, args[0], args[1], handled, n, since)
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(lockSQL, r.name)
	br := r.conn.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	committed := err == nil
	if committed {
		r.inFlight = flying
	}
	if err == nil {
		_, err = br.Exec()
	}
	var ok bool
	if err == nil {
		ok, err = r.scanLock(br.QueryRow())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.dropTx(ctx)
		if committed {
			r.state = State{Position: pos}
		}
		return false, fmt.Errorf("checkpoint cursor %q: %w", r.name, err)
	}
	if !ok {
		r.dropTx(ctx)
		r.state = State{Position: pos}
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
}

// RecordFailure stores the halt state of a failing record in the open transaction, together with the
// position of the last record that succeeded. Attempts count on from the stored state when the same
// record failed before. Unlock makes it durable.
func (r *Repository) RecordFailure(ctx context.Context, pos source.Position, f Failure) (Halt, error) {
	if r.tx == nil {
		return Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, ErrNotLocked)
	}
	args := pos.Args()
	msg := f.Err.Error()
	if len(msg) > 4000 {
		msg = msg[:4000] + "…"
	}
	attempts := 1 // the row is locked, so the state read with the lock is the stored one
	if h := r.state.Halt; h != nil && h.RecordID == f.RecordID {
		attempts = h.Attempts + 1
	}
	var status any
	if f.Status != 0 {
		status = f.Status
	}
	var h Halt
	var stored pgtype.Int4
	var haltedAt pgtype.Timestamptz
	err := r.tx.QueryRow(ctx, `
		UPDATE inorder.cursor
		SET position_created_at = $2, position_id = $3,
		    halted_attempts = $6,
		    halted_first_failure_at = CASE WHEN halted_record_id = $4 THEN halted_first_failure_at
		                                   ELSE clock_timestamp() END,
		    halted_last_failure_at = clock_timestamp(),
		    halted_next_attempt_at = clock_timestamp() + $7::interval,
		    halted_record_id = $4,
		    halted_error = $5,
		    halted_permanent = $8,
		    halted_status = $9,
		    halted_at = CASE
		        WHEN halted_record_id = $4 AND halted_at IS NOT NULL THEN halted_at
		        WHEN $8 OR (halted_record_id = $4 AND clock_timestamp() - halted_first_failure_at >= $10::interval)
		          THEN clock_timestamp()
		        END
		WHERE process_name = $1
		RETURNING halted_first_failure_at, halted_last_failure_at, halted_next_attempt_at, halted_status, halted_at`,
		r.name, args[0], args[1], f.RecordID, msg, attempts, f.RetryIn(attempts), f.Permanent, status, f.HaltAfter).
		Scan(&h.FirstFailureAt, &h.LastFailureAt, &h.NextAttemptAt, &stored, &haltedAt)
	if err != nil {
		return Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, err)
	}
	h.RecordID, h.Error, h.Attempts, h.Permanent, h.Status = f.RecordID, msg, attempts, f.Permanent, int(stored.Int32)
	h.HaltedAt = haltedAt.Time
	r.state = State{Position: pos, Halt: &h}
	r.dirty = true
	return h, nil
}

// SetSource records which table and columns the process reads (Table qualified), so status can measure
// what is behind.
func (r *Repository) SetSource(ctx context.Context, src source.Spec) error {
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
	tx, dirty := r.tx, r.dirty
	r.tx, r.dirty = nil, false
	if !dirty {
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			return fmt.Errorf("unlock cursor %q: %w", r.name, err)
		}
		return nil
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("unlock cursor %q: %w", r.name, err)
	}
	return nil
}

// Abort rolls the open transaction back, dropping every change since the last durable position, and
// releases the row. It is a no-op when the cursor is not locked.
func (r *Repository) Abort(ctx context.Context) error {
	if r.tx == nil {
		return nil
	}
	tx := r.tx
	r.tx, r.dirty = nil, false
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("abort cursor %q: %w", r.name, err)
	}
	return nil
}

func (r *Repository) dropTx(ctx context.Context) {
	if r.tx != nil {
		_ = r.tx.Rollback(ctx)
		r.tx, r.dirty = nil, false
	}
}

// Broken reports whether the connection is gone, so that the caller should Reconnect rather than give up.
func (r *Repository) Broken(err error) bool {
	if r.conn == nil || r.conn.IsClosed() {
		return true
	}
	return IsConnectionError(err)
}

// Reconnect drops the current connection (and with it any lock) and opens a new one.
func (r *Repository) Reconnect(ctx context.Context) error {
	if r.released {
		return ErrReleased
	}
	r.tx = nil
	if r.conn != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = r.conn.Close(closeCtx)
		cancel()
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	return r.register(ctx)
}

// Release ends the open transaction (committing it), gives up ownership, closes the connection and
// removes the repository from its registry. Opening the name again afterwards makes a new repository.
func (r *Repository) Release(ctx context.Context) error {
	err := r.Unlock(ctx)
	if r.owner && r.conn != nil && !r.conn.IsClosed() {
		// Give up ownership now, so a standby takes over at once rather than when the server has noticed
		// that the connection closed.
		if _, uerr := r.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", LockKey(r.name)); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
		r.owner = false
	}
	r.registry.mu.Lock()
	if r.registry.repos[r.key] == r {
		delete(r.registry.repos, r.key)
	}
	r.registry.mu.Unlock()
	r.mu.Lock()
	r.released = true
	conn := r.conn
	r.mu.Unlock()
	if conn != nil {
		if cerr := conn.Close(ctx); err == nil && cerr != nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, cerr)
		}
	}
	return err
}

// IsConnectionError reports whether err means the database could not be reached or the session was cut
// (as opposed to the database refusing what was asked): such errors are retried with backoff.
func IsConnectionError(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 (connection exception), 57P01..57P03 (admin shutdown, crash shutdown, cannot connect
		// now) and 25P03 (idle-in-transaction timeout) all mean this session is over.
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08",
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", pgErr.Code == "25P03":
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || errors.Is(err, net.ErrClosed) ||
		pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// ErrPartitionsChanged is returned by RegisterPartitioned when the process is already split another way.
var ErrPartitionsChanged = errors.New("the process has another number of partitions")

// RegisterPartitioned records that process name is split into n partitions, or checks that it is. A
// different number, or a process that already ran as one stream, is refused: changing the split is an
// explicit operation (drain, then Repartition), since positions do not carry over between splits.
func RegisterPartitioned(ctx context.Context, conn *pgx.Conn, name string, n int) error {
	if _, err := conn.Exec(ctx, `INSERT INTO inorder.cursor (process_name, partitions) VALUES ($1, $2)
		ON CONFLICT (process_name) DO NOTHING`, name, n); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	var have *int32
	var ran bool
	if err := conn.QueryRow(ctx, `SELECT partitions, source_table IS NOT NULL FROM inorder.cursor WHERE process_name = $1`,
		name).Scan(&have, &ran); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	switch {
	case have == nil && ran:
		return fmt.Errorf("%w: it runs as one stream; to split it, stop it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, name, n)
	case have == nil:
		_, err := conn.Exec(ctx, "UPDATE inorder.cursor SET partitions = $2 WHERE process_name = $1 AND partitions IS NULL", name, n)
		return err
	case int(*have) != n:
		return fmt.Errorf("%w: it has %d, asked for %d; drain it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, *have, n, name, n)
	}
	return nil
}

// PartitionName is the process name of partition index of count, "<process>#<index>/<count>": the name
// of its own cursor row (processor.PartitionName documents it for users).
func PartitionName(process string, index, count int) string {
	return fmt.Sprintf("%s#%d/%d", process, index, count)
}

// InstancesLockKey is the key of the advisory lock that every running instance of partitioned process
// name holds shared on its coordinating connection, from before it checks the partition count until it
// stops. Repartition takes it exclusively: an instance between two partitions owns none of their locks,
// but holds this one.
func InstancesLockKey(name string) int64 { return LockKey(name + "#instances") }
