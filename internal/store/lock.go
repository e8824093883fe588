package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// Lock is the cursor row lock that a batch works under: taking it (and the process with it), keeping it
// from one batch to the next, and the commits that record the position and lock the row again.
type Lock struct {
	name  string
	cfg   Config
	sess  *Session
	owner *Lease
	pos   *Position

	lockSQL  string
	lockArgs []any // after the name
	// lockSQL17 is lockSQL for a server that has transaction_timeout (17 and later), which it turns off
	// for the transaction (see withoutTransactionTimeout); lockQuery picks one per connection.
	lockSQL17 string
	// rider travels after the lock in every round trip that locks the row (see SetRider); rode says that
	// it ran in the open transaction and TakeRide has not reported it yet.
	rider          *Rider
	rode, rideNext bool
}

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
func (r *Lock) TryLock(ctx context.Context) (bool, error) {
	if r.sess.released {
		return false, ErrReleased
	}
	if err := r.sess.attach(ctx); err != nil {
		return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
	}
	defer func() {
		if r.sess.tx == nil {
			r.sess.Detach()
		}
	}()
	if err := r.owner.retakeSession(ctx); err != nil {
		return false, fmt.Errorf("lock cursor %q: %w", r.name, err)
	}
	if r.sess.tx != nil {
		return r.keepLock(ctx)
	}
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.owner.token == 0 {
		if err := r.owner.heartbeat(ctx, r.sess.conn); err != nil {
			return false, err
		}
		vacant, err := r.owner.vacant(ctx)
		switch {
		case err == nil && !vacant:
			r.owner.freeSince = time.Time{} // owned: a DeferTake counts from the next time it is free
		case err == nil && !r.owner.mayTake(ctx):
			r.owner.giveUpSession(ctx) // only an owner holds the advisory lock
			vacant = false
		}
		if err != nil || !vacant {
			return false, err
		}
	}
	sent := time.Now()
	ok, err := r.lock(ctx)
	if err == nil && !ok {
		err = r.owner.lockSkipped(ctx)
	}
	if err != nil || !ok {
		if r.owner.token == 0 {
			r.owner.giveUpSession(ctx)
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
func (r *Lock) keepLock(ctx context.Context) (bool, error) {
	if time.Since(r.owner.beat) < r.cfg.lease()/3 {
		return true, nil
	}
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if err := r.owner.heartbeat(ctx, r.sess.tx); err != nil {
		r.dropTx(ctx)
		return false, err
	}
	r.sess.dirty = true
	return true, nil
}

// settleLease decides, with the row locked, whose the process is: this instance's (renewing its lease when
// due), nobody's (this instance takes it), or another's (the lock is given back). sent is when the lock
// was sent, from which a lease renewed in its round trip is counted.
func (r *Lock) settleLease(ctx context.Context, sent time.Time) (bool, error) {
	var err error
	switch l := r.owner.lease; {
	case r.owner.token != 0 && l.token == r.owner.token:
		// Ours. Renew when a third has passed (and say the instance is there, in the same transaction,
		// so that an idle owner commits once per third of its lease), or when the row says this session
		// holds the advisory lock and it does not (a reconnect lost it), or the other way round.
		if l.left < r.cfg.lease()*2/3 || l.session != r.owner.session() || time.Since(r.owner.beat) >= r.cfg.lease()/3 {
			r.owner.beat = time.Time{}
			if err = r.owner.heartbeat(ctx, r.sess.tx); err == nil {
				err = r.renew(ctx, false, sent)
			}
		} else if r.owner.leaseFrom.IsZero() {
			// Owned since before a reconnect: what the row says is what others see.
			r.owner.leaseFrom = sent.Add(l.left - r.cfg.lease())
		}
	case l.free || (l.session && r.owner.session()):
		// Nobody's, or the owner's session has ended: this instance's advisory lock proves it.
		err = r.renew(ctx, true, sent)
	default:
		// Another instance's lease runs: this one lost the process, or looked as it changed hands.
		r.dropTx(ctx)
		r.owner.lost()
		r.owner.giveUpSession(ctx)
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
func (r *Lock) renew(ctx context.Context, take bool, sent time.Time) error {
	seq, err := r.owner.claim(ctx, take)
	if err != nil {
		return err
	}
	r.pos.open.rowSeq = seq
	r.owner.renewing, r.rideNext = sent, true
	_, err = r.commitRelock(ctx, "renew lease of")
	if errors.Is(err, ErrFenced) {
		return nil // taken meanwhile; the repository is unlocked and says so
	}
	return err
}

// lock begins a transaction and locks the row in it, with the rider after the lock, in one round trip
// (two on a new connection, whose first transaction is begun by pgx to get its handle). It reports false
// when the row is held by another transaction (or is not there); the repository is then unlocked.
func (r *Lock) lock(ctx context.Context) (bool, error) {
	b := &pgx.Batch{}
	if r.sess.handle == nil {
		h, err := r.sess.conn.Begin(ctx)
		if err != nil {
			return false, fmt.Errorf("begin: %w", err)
		}
		r.sess.handle = h
	} else {
		b.Queue("BEGIN")
	}
	r.sess.tx = r.sess.handle
	ok, err := r.lockIn(ctx, b, len(b.QueuedQueries))
	if err == nil && ok {
		err = r.pos.readCheckpoint(ctx)
	}
	if err != nil || !ok {
		r.dropTx(ctx)
	} else {
		r.sess.former = 0 // whatever it held, it holds no more
	}
	return ok, err
}

// lockIn queues the lock statement and the rider after the statements already in b (skip of them
// answer no rows), sends the batch, and reads the lock and the rider. It reports whether the row was
// locked; the transaction the batch ends in stays open either way.
func (r *Lock) lockIn(ctx context.Context, b *pgx.Batch, skip int) (bool, error) {
	b.Queue(r.lockQuery(), append([]any{r.name}, r.lockArgs...)...)
	ride := r.rider != nil && !r.rider.stays()
	if ride {
		b.Queue(r.rider.SQL, r.rider.Args...)
	}
	br := r.sess.conn.SendBatch(ctx, b)
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
		if ride {
			err = r.ride(br)
		} else {
			r.rode = true // what it would have brought is at hand (see Rider.StayFunc)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return ok, err
}

// ride reads the rider's result from br.
func (r *Lock) ride(br pgx.BatchResults) error {
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
	// StayFunc, when set, is asked right before the rider would travel, with the connection in hand: true
	// leaves it out of this round trip, the caller having at hand what it would bring (another
	// transaction's poll, fresh enough), and TakeRide then reports it as having ridden. Nil: it always
	// travels.
	StayFunc func() bool
}

// stays asks StayFunc.
func (rd *Rider) stays() bool { return rd.StayFunc != nil && rd.StayFunc() }

// SetRider makes rider travel with every lock of the row by TryLock from now on, and with the relock of
// the next Checkpoint or Commit after RideNext; nil stops it.
func (r *Lock) SetRider(rider *Rider) { r.rider = rider }

// RideNext makes the rider travel with the relock of the next Checkpoint or Commit: the one that ends a
// batch, whose lock the next batch goes on with. The commits within a batch (a position per record) leave
// it out, since its result would not be used.
func (r *Lock) RideNext() { r.rideNext = true }

// TakeRide reports whether the rider ran in the open transaction since the last call (its ScanFunc has
// read the rows, and they are as fresh as the lock), or its StayFunc kept it out of the lock's round trip.
func (r *Lock) TakeRide() bool {
	rode := r.rode && r.sess.tx != nil
	r.rode = false
	return rode
}

// Locked reports whether the repository holds the cursor row lock.
func (r *Lock) Locked() bool { return r.sess.tx != nil }

func (r *Lock) scanLock(row pgx.Row) (bool, error) {
	var (
		backend uint32
		marks   string
		rowSeq  int64
		handled int64
		flying  int32
		since   pgtype.Timestamptz
		slot    int
	)
	st, ok, err := scanState(row, append(append([]any{&r.pos.version}, scanLease(&r.owner.lease)...), &backend, &marks,
		&rowSeq, &handled, &flying, &since, &slot)...)
	if ok && err == nil {
		if r.sess.backend != 0 && backend != r.sess.backend {
			r.sess.movesBackends = true // a transaction pooler: sessions cannot be trusted from now on
		}
		r.sess.backend = backend
		row := recorded{cp: checkpoint{Position: st.Position, Handled: handled,
			InFlight: InFlight{Records: int(flying), Since: since.Time}}, rowSeq: rowSeq}
		r.pos.locked(st, row, slot, r.owner.token != 0 && r.owner.lease.token == r.owner.token)
	}
	return ok, err
}

// Renewed takes a renewal the probe made for this owner (see ProbeRenewal): the lease runs from when it
// was sent, the instance said it is there then, and the cursor row is at the version and position_seq
// the renewal left. A renewal made for an earlier tenure, or while the row is locked, is ignored.
func (r *Lock) Renewed(rn *Renewed, token int64) {
	if rn == nil || token != r.owner.token || r.owner.token == 0 || r.sess.tx != nil {
		return
	}
	r.owner.renewedAt(rn.Sent)
	r.pos.version = rn.Version
	// The renewal was made only while the row was at the version this owner last saw, so what it folded
	// into the row is this owner's own newest entry: the row's position is still the one the owner knows,
	// and the next lock need not look for newer entries.
	r.pos.durable.rowSeq = rn.RowSeq
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
func (r *Lock) lockQuery() string {
	if hasTransactionTimeout(r.sess.conn) {
		return r.lockSQL17
	}
	return r.lockSQL
}

// Tx returns the transaction that holds the cursor row lock, or nil when the cursor is not locked. A
// TxHandler's writes go through it so that they commit with the position.
func (r *Lock) Tx() pgx.Tx { return r.sess.tx }

// Checkpoint commits pos now (durable as SynchronousCommit says), counting handled records and recording
// what is in flight, and locks the row again in a new transaction, all in one round trip. It reports false
// when someone else took the row in the instant between the commit and the new lock: an operator action
// (Owner stays true), or another instance that found the lease run out (Owner turns false). The repository
// is then unlocked, and the next TryLock reads what they changed.
func (r *Lock) Checkpoint(ctx context.Context, pos inordertype.Position, handled int, flying InFlight) (bool, error) {
	if r.sess.tx == nil {
		return false, fmt.Errorf("checkpoint cursor %q: %w", r.name, ErrNotLocked)
	}
	if flying.Records == 0 {
		flying = InFlight{}
	}
	r.pos.next = checkpoint{Position: pos, Handled: r.pos.next.Handled + int64(handled), InFlight: flying}
	return r.commitRelock(ctx, "checkpoint")
}

// Commit commits what the open transaction holds now (durable as SynchronousCommit says), counting handled
// records without moving the position (a parked record delivered, and removed, by a redrive), and locks
// the row again, as Checkpoint does; it reports false as Checkpoint does.
func (r *Lock) Commit(ctx context.Context, handled int) (bool, error) {
	if r.sess.tx == nil {
		return false, fmt.Errorf("commit cursor %q: %w", r.name, ErrNotLocked)
	}
	r.pos.next.Handled += int64(handled)
	return r.commitRelock(ctx, "commit")
}

// commitRelock records the checkpoint reached (see pendingWrite), commits, and locks the row again in a
// new transaction with the rider after the lock, all in one round trip.
func (r *Lock) commitRelock(ctx context.Context, what string) (bool, error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	b := &pgx.Batch{}
	commit := r.pos.queueCommit(b)
	b.Queue("BEGIN")
	b.Queue(r.lockQuery(), append([]any{r.name}, r.lockArgs...)...)
	ride := r.rider != nil && r.rideNext
	stay := ride && r.rider.stays()
	if ride && !stay {
		b.Queue(r.rider.SQL, r.rider.Args...)
	}
	r.rode, r.rideNext = false, false
	br := r.sess.conn.SendBatch(ctx, b)
	err := r.pos.readCommit(br, commit)
	done := err == nil
	if !done && !errors.Is(err, ErrFenced) {
		// The server may have run the whole round trip, commit included, before the answer was lost: what
		// it holds is read again at the next lock.
		r.pos.known = false
	}
	if done {
		r.pos.durable = r.pos.open
		r.owner.commitRenewal()
	}
	if err == nil {
		_, err = br.Exec()
	}
	var ok bool
	if err == nil {
		ok, err = r.scanLock(br.QueryRow())
	}
	if err == nil && ok && ride {
		if stay {
			r.rode = true
		} else {
			err = r.ride(br)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && ok && r.owner.lease.token == r.owner.token {
		err = r.pos.readCheckpoint(ctx)
	}
	pos := r.pos.durable.cp.Position
	if err != nil {
		r.dropTx(ctx)
		if done {
			r.pos.state = inordertype.State{Position: pos}
		}
		if errors.Is(err, ErrFenced) {
			r.owner.lost()
		}
		return false, fmt.Errorf("%s cursor %q: %w", what, r.name, pooler.Explain(err))
	}
	if !ok || r.owner.lease.token != r.owner.token {
		r.dropTx(ctx)
		r.pos.state = inordertype.State{Position: pos}
		if ok { // relocked, but the lease is another's
			r.owner.lost()
			r.owner.giveUpSession(ctx)
		}
		return false, nil
	}
	r.sess.dirty = false // committed; the new transaction holds only the lock
	return true, nil
}

// Unlock commits the open transaction, which makes the position durable and releases the row for other
// instances. It is a no-op when the cursor is not locked. A transaction that changed nothing (an empty
// poll) is rolled back instead: the row lock gave it a transaction id, and committing it would wait for a
// WAL flush, once per poll, for nothing.
func (r *Lock) Unlock(ctx context.Context) error {
	if r.sess.tx == nil {
		return nil
	}
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	defer r.sess.Detach()
	_, _, _, writes := r.pos.pendingWrite()
	dirty := r.sess.dirty || writes
	r.sess.tx, r.sess.dirty, r.rode = nil, false, false
	if !dirty {
		if _, err := r.sess.conn.Exec(ctx, "ROLLBACK"); err != nil {
			r.sess.closeConn()
			return fmt.Errorf("unlock cursor %q: %w", r.name, err)
		}
		return nil
	}
	b := &pgx.Batch{}
	commit := r.pos.queueCommit(b)
	br := r.sess.conn.SendBatch(ctx, b)
	err := r.pos.readCommit(br, commit)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.owner.renewing, r.pos.known = time.Time{}, false
		r.pos.rollBack()
		if errors.Is(err, ErrFenced) {
			r.owner.lost()
		}
		r.sess.closeConn()
		return fmt.Errorf("unlock cursor %q: %w", r.name, err)
	}
	r.pos.durable = r.pos.open
	r.owner.commitRenewal()
	return nil
}

// Abort rolls the open transaction back, dropping every change since the last durable position, and
// releases the row. It is a no-op when the cursor is not locked.
func (r *Lock) Abort(ctx context.Context) error {
	if r.sess.tx == nil {
		return nil
	}
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	defer r.sess.Detach()
	r.sess.tx, r.sess.dirty, r.rode, r.owner.renewing = nil, false, false, time.Time{}
	r.pos.rollBack()
	if r.sess.conn.IsClosed() {
		return nil
	}
	if _, err := r.sess.conn.Exec(ctx, "ROLLBACK"); err != nil {
		r.sess.closeConn()
		return fmt.Errorf("abort cursor %q: %w", r.name, err)
	}
	return nil
}

func (r *Lock) dropTx(ctx context.Context) {
	if r.sess.tx != nil {
		r.sess.tx, r.sess.dirty, r.rode, r.owner.renewing = nil, false, false, time.Time{}
		r.pos.rollBack()
		if !r.sess.conn.IsClosed() {
			if _, err := r.sess.conn.Exec(ctx, "ROLLBACK"); err != nil {
				r.sess.closeConn()
			}
		}
	}
}
