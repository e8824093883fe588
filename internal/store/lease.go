package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/inorder-dev/inorder/internal/dial"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/internal/pooler"
)

// lease is what a cursor row says of its owner.
type lease struct {
	epoch    int64
	token    int64
	instance string
	session  bool          // the owner holds the advisory lock on its session
	free     bool          // nobody owns the process: the lease ran out or was given up
	expired  bool          // the lease ran out (rather than being given up)
	left     time.Duration // until it runs out
	ahead    time.Duration // how far the database's clock was ahead of this machine's at the look
}

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

// Locked reports whether the repository holds the cursor row lock.
func (r *Repository) Locked() bool { return r.tx != nil }

// leaseColumns are what a cursor row says of its owner, as scanLease reads them.
const leaseColumns = `owner_epoch, owner_token, coalesce(owner_instance, ''), owner_session,
	coalesce(lease_expires_at <= clock_timestamp(), true), coalesce(lease_expires_at <= clock_timestamp(), false),
	coalesce((extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint, 0), clock_timestamp()`

func scanLease(l *lease) []any {
	return []any{&l.epoch, &l.token, &l.instance, &l.session, &l.free, &l.expired, &leaseMillis{&l.left}, &clockAhead{&l.ahead}}
}

// clockAhead scans the database's clock_timestamp() into how far it is ahead of this machine's clock.
type clockAhead struct{ d *time.Duration }

func (c *clockAhead) ScanTimestamptz(v pgtype.Timestamptz) error {
	*c.d = time.Until(v.Time)
	return nil
}

// Now is the database's clock as of the last look at the cursor row, carried on by this machine's: the
// one clock that judges how long a record has failed. The cursor row's times are the database's, and the
// instances that share the row may disagree on the time; measured against the row's own clock, a record
// halts after Config.HaltAfter whichever instance delivers it.
func (r *Repository) Now() time.Time { return time.Now().Add(r.lease.ahead) }

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
	       position_seq, records_handled, in_flight, in_flight_since, ` + slotColumn + `
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
	if r.advisory && !r.shared.holds(r.advGen) {
		r.advisory = false // the instance's session was lost, and the lock with it
		if r.token != 0 && r.trySession() {
			// The owner takes it again on the session connected anew. A session that cannot be reached
			// only means that standbys wait out the lease should this instance vanish, but credentials
			// the database refuses are said at once, as for any connection (the wait that the loss ended
			// brought the owner here; see SessionLost).
			took, gen, err := r.shared.tryLock(ctx, LockKey(r.name))
			if _, refused := dial.CredentialsRefused(err); refused {
				return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
			}
			if err == nil && took {
				r.advisory, r.advGen = true, gen
			}
		}
	}
	if r.tx != nil {
		return r.keepLock(ctx)
	}
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.token == 0 {
		if err := r.heartbeat(ctx, r.conn); err != nil {
			return false, err
		}
		vacant, err := r.vacant(ctx)
		switch {
		case err == nil && !vacant:
			r.freeSince = time.Time{} // owned: a DeferTake counts from the next time it is free
		case err == nil && !r.mayTake(ctx):
			r.giveUpSession(ctx) // only an owner holds the advisory lock
			vacant = false
		}
		if err != nil || !vacant {
			return false, err
		}
	}
	sent := time.Now()
	ok, err := r.lock(ctx)
	if err == nil && !ok {
		err = r.lockSkipped(ctx)
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
	return r.settleLease(ctx, sent)
}

// keepLock goes on with the lock kept from the last batch's commit: it still says, once per third of the
// lease, that the instance is there (status counts it), in the transaction that holds the row.
func (r *Repository) keepLock(ctx context.Context) (bool, error) {
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

// lockSkipped looks into why the row lock was skipped: the row is gone (ErrForgotten), this instance's
// own session from before a reconnect holds it (endFormer), or an owner whose lease ran out does
// (endStale).
func (r *Repository) lockSkipped(ctx context.Context) error {
	if err := r.exists(ctx); err != nil {
		return err
	}
	switch {
	case r.former != 0:
		return r.endFormer(ctx)
	case r.token == 0 && r.lease.expired:
		return r.endStale(ctx)
	}
	return nil
}

// settleLease decides, with the row locked, whose the process is: this instance's (renewing its lease when
// due), nobody's (this instance takes it), or another's (the lock is given back). sent is when the lock
// was sent, from which a lease renewed in its round trip is counted.
func (r *Repository) settleLease(ctx context.Context, sent time.Time) (bool, error) {
	var err error
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
	until := r.LeaseUntil()
	if until.IsZero() {
		return 0
	}
	return max(0, time.Until(until))
}

// LeaseUntil is when this instance's lease surely runs out, as far as this instance knows: Lease after it
// sent the last renewal it committed. Zero when it does not own the process. It reads no clock, so that
// the processor may ask it for every record. Whatever the cursor transaction open now has sent, it sent
// after LeaseUntil minus Lease, so the transaction cannot have idled since before then.
func (r *Repository) LeaseUntil() time.Time {
	if r.token == 0 || r.leaseFrom.IsZero() {
		return time.Time{}
	}
	return r.leaseFrom.Add(r.cfg.lease())
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
	err := r.conn.QueryRow(ctx, `SELECT `+leaseColumns+` FROM inorder.cursor WHERE process_name = $1`, r.name).
		Scan(scanLease(&r.lease)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("cursor %q: %w", r.name, ErrForgotten)
	}
	if err != nil {
		return false, fmt.Errorf("read lease of cursor %q: %w", r.name, pooler.Explain(err))
	}
	if r.trySession() && r.lease.session && !r.lease.free {
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
// row-locked transaction, and takes the advisory lock on the instance's session if it can.
func (r *Repository) claim(ctx context.Context, take bool) error {
	epoch, token := r.epoch, r.token
	if take {
		epoch, token = r.lease.epoch+1, newToken()
	}
	// The instance's session takes the lock; a session that cannot be reached only means that standbys
	// wait out the lease should this instance vanish.
	if r.trySession() {
		if took, gen, err := r.shared.tryLock(ctx, LockKey(r.name)); err == nil && took {
			r.advisory, r.advGen = true, gen
		}
	}
	// The row is rewritten for the lease anyway: the position as it stands goes into it (a fold), so that
	// the row alone is at most a third of the lease behind (an instance of the version before the
	// checkpoint log reads only the row).
	var seq int64
	err := r.tx.QueryRow(ctx, `
		UPDATE inorder.cursor AS c
		SET owner_epoch = $2, owner_token = $7, owner_instance = $3,
		    lease_expires_at = clock_timestamp() + $4::interval,
		    owner_since = CASE WHEN owner_token = $7 THEN owner_since ELSE clock_timestamp() END,
		    owner_session = $5,
		    `+foldSet+`, `+windowSet+`
		FROM inorder.position AS p
		WHERE c.process_name = $1 AND c.owner_token = $6 AND p.process_name = c.process_name
		RETURNING c.owner_session, c.position_seq`,
		r.name, epoch, r.instance(), r.cfg.lease(), r.session(), r.lease.token, token).
		Scan(&r.advisory, &seq)
	if err != nil {
		return err
	}
	r.open.rowSeq = seq
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
	return r.advisory && !r.pooled && !r.movesBackends && r.shared.holds(r.advGen)
}

// giveUpSession releases the advisory lock held by an instance that does not own the process, so that
// only an owner ever holds it (owner_session relies on that).
func (r *Repository) giveUpSession(ctx context.Context) {
	if r.advisory {
		_ = r.shared.unlock(ctx, LockKey(r.name), r.advGen) // a session that failed took the lock with it
		r.advisory = false
	}
}

func (r *Repository) scanLock(row pgx.Row) (bool, error) {
	var (
		backend uint32
		marks   string
		rowSeq  int64
		handled int64
		flying  int32
		since   pgtype.Timestamptz
		slot    int
	)
	st, ok, err := scanState(row, append(append([]any{&r.version}, scanLease(&r.lease)...), &backend, &marks,
		&rowSeq, &handled, &flying, &since, &slot)...)
	if ok && err == nil {
		r.slot, r.lockedAt = slot, time.Now()
		if r.backend != 0 && backend != r.backend {
			r.movesBackends = true // a transaction pooler: sessions cannot be trusted from now on
		}
		r.backend = backend
		r.rowHalted = st.Halt != nil
		if r.known && r.token != 0 && r.lease.token == r.token && rowSeq == r.durable.rowSeq {
			// Nobody but this owner has written a position since it last looked: its own is the newest.
			st.Position = r.durable.cp.Position
		} else {
			// The row's position, until readCheckpoint has looked for newer entries.
			r.durable = recorded{cp: checkpoint{Position: st.Position, Handled: handled,
				InFlight: InFlight{Records: int(flying), Since: since.Time}}, rowSeq: rowSeq}
			r.known = false
		}
		r.open, r.next = r.durable, r.durable.cp
		r.state = st
	}
	return ok, err
}

// Release ends the open transaction (committing it), gives up ownership, closes the connection and
// removes the repository from its store. Opening the name again afterwards makes a new repository.
func (r *Repository) Release(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	err := r.Unlock(ctx)
	if r.token != 0 || !r.beat.IsZero() {
		if aerr := r.attach(ctx); aerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, aerr)
		}
	}
	if r.token != 0 && r.conn != nil && !r.conn.IsClosed() {
		// Give up the lease now, so a standby takes over at once rather than when it runs out.
		if uerr := r.giveUpLease(ctx); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
		r.epoch, r.token = 0, 0
	}
	r.giveUpSession(ctx)
	if !r.beat.IsZero() && r.conn != nil && !r.conn.IsClosed() {
		if _, uerr := r.conn.Exec(ctx, "DELETE FROM inorder.instance WHERE process_name = $1 AND instance = $2",
			r.name, r.instance()); uerr != nil && err == nil {
			err = fmt.Errorf("release cursor %q: %w", r.name, uerr)
		}
	}
	r.store.forget(r)
	r.Unclaim()
	r.letGo()
	r.mu.Lock()
	r.released = true
	r.mu.Unlock()
	r.closeOwn()
	return err
}

// ProbeRenewal returns this owner's lease for the probe to renew while the processor waits (see Renewal),
// or nil when its own batch must: it does not own the process, holds the row locked, or the row does not
// say of its session what it should (only a batch's renewal sets that right).
func (r *Repository) ProbeRenewal() *Renewal {
	if r.token == 0 || r.tx != nil || r.leaseFrom.IsZero() || r.lease.session != r.session() {
		return nil
	}
	due := r.leaseFrom.Add(r.cfg.lease() / 3)
	if beat := r.beat.Add(r.cfg.lease() / 3); !r.beat.IsZero() && beat.Before(due) {
		due = beat
	}
	return &Renewal{Instance: r.instance(), Token: r.token, Lease: r.cfg.lease(), Due: due, ApplicationName: r.ApplicationName()}
}

// SessionLost returns a channel that closes when the instance's session that holds this owner's advisory
// lock is lost (the server ended it, or it was cut off), so that a wait ends and the owner's next batch
// learns why (a refusal of the credentials, say) at once; nil when the owner holds no such lock.
func (r *Repository) SessionLost() <-chan struct{} {
	if !r.advisory || r.advGen == 0 {
		return nil
	}
	return r.shared.lostSignal(r.advGen)
}

// Renewed takes a renewal the probe made for this owner (see ProbeRenewal): the lease runs from when it
// was sent, the instance said it is there then, and the cursor row is at the version the renewal left. A
// renewal made for an earlier tenure, or while the row is locked, is ignored.
func (r *Repository) Renewed(rn *Renewed, token int64) {
	if rn == nil || token != r.token || r.token == 0 || r.tx != nil {
		return
	}
	if rn.Sent.After(r.leaseFrom) {
		r.leaseFrom = rn.Sent
	}
	if rn.Sent.After(r.beat) {
		r.beat = rn.Sent
	}
	r.version = rn.Version
	r.lease.left = r.cfg.lease()
}
