package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/internal/dial"
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

// Lease is the process's ownership as this instance knows it (see the package documentation): its tenure,
// its lease and the advisory lock on the instance's session, and when it may take a free process.
type Lease struct {
	name string
	cfg  Config
	sess *Session

	epoch    int64 // the epoch of this instance's tenure, for people; 0 when it does not own the process
	token    int64 // the tenure's random token, for the fence; 0 when it does not own the process
	advisory bool  // this session holds the process's advisory lock
	// advGen is the generation of the shared session under which this instance took its advisory lock.
	advGen uint64
	lease  lease // what the row said of its owner when last read
	// leaseFrom is when this instance sent the last statement that renewed its lease and has committed
	// since: the lease the row holds runs at least until leaseFrom + Lease. renewing is when the open
	// transaction last renewed it (zero: it did not); it counts once committed.
	leaseFrom, renewing time.Time
	// staleTried says that ending a stale owner's session was refused (no privilege): not tried again.
	staleTried bool
	ended      Ended     // the sessions TryLock ended, until EndedSessions reports them
	beat       time.Time // when this instance last said it is there (see heartbeat)
	// Taking a free process (see fleet.go): not before notBefore (this instance handed it over), and only
	// once it has been seen free since freeSince for deferFor, which takeAfter decided at that first sight.
	notBefore, freeSince time.Time
	deferFor             time.Duration
	takeAfter            func(context.Context) time.Duration
}

// Owner reports whether this instance owned the process at its last look at the cursor row. TryLock
// returning false while Owner is true means the row itself is held for a moment by someone else: an
// operator action.
func (r *Lease) Owner() bool { return r.token != 0 }

// Epoch returns the epoch of this instance's tenure as owner, 0 when it does not own the process: a
// number for people (logs, status). Tenure tells tenures apart.
func (r *Lease) Epoch() int64 { return r.epoch }

// Tenure returns the random token of this instance's tenure as owner, 0 when it does not own the process.
// Unlike the epoch it is never handed out twice, so a different tenure from one batch to the next always
// means that another instance owned the process in between.
func (r *Lease) Tenure() int64 { return r.token }

// Holder names the instance that owned the process at the last look at its row, when that was not this
// one; empty when nobody did.
func (r *Lease) Holder() string {
	if r.token != 0 || r.lease.free {
		return ""
	}
	return r.lease.instance
}

// lost ends this instance's tenure as it knows it: another instance owns the process, or the fence
// refused a write, or this one gave it up.
func (r *Lease) lost() { r.epoch, r.token, r.leaseFrom = 0, 0, time.Time{} }

// renewedAt takes a renewal of the lease sent at sent outside the batches (by the probe): the lease runs
// from then, and the instance said it is there then.
func (r *Lease) renewedAt(sent time.Time) {
	if sent.After(r.leaseFrom) {
		r.leaseFrom = sent
	}
	if sent.After(r.beat) {
		r.beat = sent
	}
	r.lease.left = r.cfg.lease()
}

// commitRenewal counts the renewal the open transaction made, if it made one, now that it has committed:
// the lease runs from when it was sent.
func (r *Lease) commitRenewal() {
	if !r.renewing.IsZero() {
		r.leaseFrom, r.renewing = r.renewing, time.Time{}
	}
}

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
func (r *Lease) Now() time.Time { return time.Now().Add(r.lease.ahead) }

// leaseMillis scans milliseconds into a duration.
type leaseMillis struct{ d *time.Duration }

func (m *leaseMillis) ScanInt64(v pgtype.Int8) error {
	*m.d = time.Duration(v.Int64) * time.Millisecond
	return nil
}

// ErrForgotten is returned when a process's cursor row is gone while an instance runs it: an operator
// forgot the process (see cursor.Forget), or a failover lost its registration. The instance stops rather
// than register the process anew, which would start it over.
var ErrForgotten = errors.New("the process's cursor row is gone (forgotten by an operator?); not registering it anew")

// ErrFenced is returned when a position write finds that another instance has taken the process: the write
// is refused, so an instance whose lease was taken over can never write a position.
var ErrFenced = errors.New("another instance has taken over the process")

// lockSkipped looks into why the row lock was skipped: the row is gone (ErrForgotten), this instance's
// own session from before a reconnect holds it (endFormer), or an owner whose lease ran out does
// (endStale).
func (r *Lease) lockSkipped(ctx context.Context) error {
	if err := r.exists(ctx); err != nil {
		return err
	}
	switch {
	case r.sess.former != 0:
		return r.endFormer(ctx)
	case r.token == 0 && r.lease.expired:
		return r.endStale(ctx)
	}
	return nil
}

// LeaseLeft is how much of this instance's lease surely remains, as far as this instance knows: from the
// last renewal it committed, measured from when it sent it. Zero when it does not own the process. An
// owner must not start work it cannot finish within it.
func (r *Lease) LeaseLeft() time.Duration {
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
func (r *Lease) LeaseUntil() time.Time {
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
func (r *Lease) endStale(ctx context.Context) error {
	if r.staleTried {
		return nil
	}
	var ended []int32
	// The CTE is computed first, so that no backend is ended before every condition has held for it.
	rows, err := r.sess.conn.Query(ctx, `
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
func (r *Lease) endFormer(ctx context.Context) error {
	former := r.sess.former
	var ended bool
	err := r.sess.conn.QueryRow(ctx, `
		WITH former AS MATERIALIZED (
			SELECT a.pid FROM pg_stat_activity AS a
			WHERE a.pid = $1 AND a.pid <> pg_backend_pid() AND a.application_name = left($2, 63)
			  AND EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.pid = a.pid AND l.locktype = 'relation'
			              AND l.relation = 'inorder.cursor'::regclass AND l.granted))
		SELECT count(*) > 0 FROM former WHERE pg_terminate_backend(pid)`, int32(former), applicationName(r.name, r.cfg)).Scan(&ended)
	if err != nil {
		return fmt.Errorf("end this instance's former session (pid %d): %w", former, err)
	}
	r.sess.former = 0
	if ended {
		r.ended = Ended{PIDs: []int32{int32(former)}, Instance: instanceName(r.cfg), Own: true}
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
func (r *Lease) EndedSessions() Ended {
	e := r.ended
	r.ended = Ended{}
	return e
}

// retakeSession notices that the instance's session which held the process's advisory lock was lost, and
// the lock with it; an owner takes it again on the session connected anew. A session that cannot be
// reached only means that standbys wait out the lease should this instance vanish, but credentials the
// database refuses are said at once, as for any connection (the wait that the loss ended brought the
// owner here; see SessionLost): that is the one error it returns.
func (r *Lease) retakeSession(ctx context.Context) error {
	if !r.advisory || r.sess.shared.holds(r.advGen) {
		return nil
	}
	r.advisory = false // the instance's session was lost, and the lock with it
	if r.token != 0 && r.trySession() {
		took, gen, err := r.sess.shared.tryLock(ctx, LockKey(r.name))
		if _, refused := dial.CredentialsRefused(err); refused {
			return err
		}
		if err == nil && took {
			r.advisory, r.advGen = true, gen
		}
	}
	return nil
}

// trySession reports whether this instance may take the process's advisory lock: on a direct connection,
// when it does not hold it yet.
func (r *Lease) trySession() bool { return !r.sess.pooled && !r.sess.movesBackends && !r.advisory }

// vacant reads the lease without locking anything and reports whether this instance may try to take the
// process: nobody owns it, or its owner's session has ended (this instance could take the advisory lock
// the owner held).
func (r *Lease) vacant(ctx context.Context) (bool, error) {
	var took bool
	err := r.sess.conn.QueryRow(ctx, `SELECT `+leaseColumns+` FROM inorder.cursor WHERE process_name = $1`, r.name).
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
		if took, gen, err = r.sess.shared.tryLock(ctx, LockKey(r.name)); err != nil {
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
func (r *Lease) exists(ctx context.Context) error {
	var there bool
	if err := r.sess.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)", r.name).Scan(&there); err != nil {
		return err
	}
	if !there {
		return ErrForgotten
	}
	return nil
}

// claim takes the process (take: a new epoch and token) or renews this instance's lease, inside the
// row-locked transaction, and takes the advisory lock on the instance's session if it can. It returns the
// row's position_seq, which the open transaction has now recorded.
func (r *Lease) claim(ctx context.Context, take bool) (int64, error) {
	epoch, token := r.epoch, r.token
	if take {
		epoch, token = r.lease.epoch+1, newToken()
	}
	// The instance's session takes the lock; a session that cannot be reached only means that standbys
	// wait out the lease should this instance vanish.
	if r.trySession() {
		if took, gen, err := r.sess.shared.tryLock(ctx, LockKey(r.name)); err == nil && took {
			r.advisory, r.advGen = true, gen
		}
	}
	// The row is rewritten for the lease anyway: the position as it stands goes into it (a fold), so that
	// the row alone is at most a third of the lease behind (an instance of the version before the
	// checkpoint log reads only the row).
	var seq int64
	err := r.sess.tx.QueryRow(ctx, `
		UPDATE inorder.cursor AS c
		SET owner_epoch = $2, owner_token = $7, owner_instance = $3,
		    lease_expires_at = clock_timestamp() + $4::interval,
		    owner_since = CASE WHEN owner_token = $7 THEN owner_since ELSE clock_timestamp() END,
		    owner_session = $5,
		    `+foldSet+`, `+windowSet+`
		FROM inorder.position AS p
		WHERE c.process_name = $1 AND c.owner_token = $6 AND p.process_name = c.process_name
		RETURNING c.owner_session, c.position_seq`,
		r.name, epoch, instanceName(r.cfg), r.cfg.lease(), r.session(), r.lease.token, token).
		Scan(&r.advisory, &seq)
	if err != nil {
		return 0, err
	}
	r.epoch, r.token, r.sess.dirty = epoch, token, true
	r.lease = lease{epoch: epoch, token: token, instance: instanceName(r.cfg), session: r.advisory, left: r.cfg.lease()}
	return seq, nil
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
func (r *Lease) session() bool {
	return r.advisory && !r.sess.pooled && !r.sess.movesBackends && r.sess.shared.holds(r.advGen)
}

// giveUpSession releases the advisory lock held by an instance that does not own the process, so that
// only an owner ever holds it (owner_session relies on that).
func (r *Lease) giveUpSession(ctx context.Context) {
	if r.advisory {
		_ = r.sess.shared.unlock(ctx, LockKey(r.name), r.advGen) // a session that failed took the lock with it
		r.advisory = false
	}
}

// ProbeRenewal returns this owner's lease for the probe to renew while the processor waits (see Renewal),
// or nil when its own batch must: it does not own the process, holds the row locked, or the row does not
// say of its session what it should (only a batch's renewal sets that right).
func (r *Lease) ProbeRenewal() *Renewal {
	if r.token == 0 || r.sess.tx != nil || r.leaseFrom.IsZero() || r.lease.session != r.session() {
		return nil
	}
	due := r.leaseFrom.Add(r.cfg.lease() / 3)
	if beat := r.beat.Add(r.cfg.lease() / 3); !r.beat.IsZero() && beat.Before(due) {
		due = beat
	}
	return &Renewal{Instance: instanceName(r.cfg), Token: r.token, Lease: r.cfg.lease(), Due: due, ApplicationName: applicationName(r.name, r.cfg)}
}

// SessionLost returns a channel that closes when the instance's session that holds this owner's advisory
// lock is lost (the server ended it, or it was cut off), so that a wait ends and the owner's next batch
// learns why (a refusal of the credentials, say) at once; nil when the owner holds no such lock.
func (r *Lease) SessionLost() <-chan struct{} {
	if !r.advisory || r.advGen == 0 {
		return nil
	}
	return r.sess.shared.lostSignal(r.advGen)
}
