package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// Position is the process's checkpoint (see checkpoint.go) and the cursor row's state, as the lock read
// them and the open transaction changed them.
type Position struct {
	name  string
	cfg   Config
	sess  *Session
	owner *Lease

	state   inordertype.State
	version string // the row's xmin when it was last locked
	// durable is what the database holds as of the last commit, open what the open transaction has
	// recorded (durable until it records more), next what the process has reached, which the next commit
	// records first. known says that durable is what the database holds; when it is not (a new tenure, an
	// operator's write, a commit whose answer was lost), the next lock reads it. rowHalted says that the
	// row holds a halt state, which only rewriting the row clears.
	durable, open recorded
	next          checkpoint
	known         bool
	// slot is the slot the lock of the open transaction found current, and lockedAt when its answer came
	// (see appendSlot).
	slot      int
	lockedAt  time.Time
	rowHalted bool
}

// Version returns the row version (its xmin) read when the lock was last taken. A row changed since, by
// this instance's own commits or by an operator, has another: the idle probe watches for that.
func (r *Position) Version() string { return r.version }

// State returns the position and halt state read when the lock was taken, as changed since by this
// repository.
func (r *Position) State() inordertype.State { return r.state }

// stateColumns are the columns of a cursor row that scanState reads, in its order.
const stateColumns = `position_created_at, position_id, ` + haltColumns

// haltColumns are the stateColumns after the position.
const haltColumns = `halted_record_id, halted_error, halted_attempts,
	halted_first_failure_at, halted_last_failure_at, paused, halted_permanent, halted_status, halted_next_attempt_at,
	halted_at, redrive_requested_at, halted_unavailable`

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
func (r *Position) SetPosition(ctx context.Context, pos inordertype.Position, handled int) error {
	if r.sess.tx == nil {
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
func (r *Position) SetInFlight(ctx context.Context, f InFlight) error {
	if r.sess.tx == nil {
		return fmt.Errorf("set in flight of cursor %q: %w", r.name, ErrNotLocked)
	}
	if f.Records == 0 {
		f = InFlight{}
	}
	r.next.InFlight = f
	return nil
}

// locked takes in what a lock read of the cursor row: its state, the checkpoint the row holds and the
// slot current. ours says that this instance owns the process, as it did before the lock.
func (r *Position) locked(st inordertype.State, row recorded, slot int, ours bool) {
	r.slot, r.lockedAt = slot, time.Now()
	r.rowHalted = st.Halt != nil
	if r.known && ours && row.rowSeq == r.durable.rowSeq {
		// Nobody but this owner has written a position since it last looked: its own is the newest.
		st.Position = r.durable.cp.Position
	} else {
		// The row's position, until readCheckpoint has looked for newer entries.
		r.durable = row
		r.known = false
	}
	r.open, r.next = r.durable, r.durable.cp
	r.state = st
}

// rollBack forgets what the open transaction recorded, which ends without committing: what the process
// has reached is what the database holds.
func (r *Position) rollBack() { r.open, r.next = r.durable, r.durable.cp }

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
// appendIntoSQL, foldPositionSQL, commitSQL).
func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// pendingWrite returns the statement that records r.next in the open transaction, when it differs from
// what the transaction has recorded: an entry appended to inorder.checkpoint (into the slot current when
// the row was locked, see appendSlot), or, when the row must be rewritten anyway (its halt state cleared,
// its lease renewed), a fold of the position into the row. An owner that appends moves on with the slots,
// and one that does not has its newest entry folded by the rotation.
func (r *Position) pendingWrite() (sql string, args []any, fold, ok bool) {
	if r.next.same(r.open.cp) {
		return "", nil, false, false
	}
	pos := positionArgs(r.next.Position)
	n, since := r.next.InFlight.args()
	renewDue := r.owner.leaseFrom.IsZero() || time.Since(r.owner.leaseFrom) >= r.cfg.lease()/3
	if r.rowHalted || renewDue {
		return foldPositionSQL, []any{r.name, pos[0], pos[1], r.next.Handled, n, since, r.cfg.lease(), r.owner.token}, true, true
	}
	args = []any{r.name, pos[0], pos[1], r.next.Handled, n, since, r.owner.token}
	if slot := r.appendSlot(); slot >= 0 {
		return appendIntoSQL[slot], args, false, true
	}
	return appendSQL, args, false, true
}

// commitPlan is what queueCommit queued: whether a write of the checkpoint goes first, and which kind, and
// when it was sent (a fold renews the lease from then).
type commitPlan struct {
	writes, fold bool
	sent         time.Time
}

// queueCommit queues in b the write that records the checkpoint reached (see pendingWrite), if one is
// needed, and the COMMIT.
func (r *Position) queueCommit(b *pgx.Batch) commitPlan {
	write, args, fold, writes := r.pendingWrite()
	if writes {
		b.Queue(write, args...)
	}
	b.Queue("COMMIT")
	return commitPlan{writes: writes, fold: fold, sent: time.Now()}
}

// readCommit reads the answers to what queueCommit queued: ErrFenced when the fence refused the write.
func (r *Position) readCommit(br pgx.BatchResults, c commitPlan) error {
	if c.writes {
		if err := r.readWrite(br, c.fold, c.sent); err != nil {
			if isFenced(err) {
				return ErrFenced
			}
			return err
		}
	}
	_, err := br.Exec()
	return err
}

// readWrite reads the result of pendingWrite's statement from br and takes in what it recorded.
func (r *Position) readWrite(br pgx.BatchResults, fold bool, sent time.Time) error {
	if !fold {
		var one, slot int
		if err := br.QueryRow().Scan(&one, &slot); err != nil {
			return err
		}
		r.open = recorded{cp: r.next, rowSeq: r.open.rowSeq, sent: sent}
		if slot >= CheckpointTables {
			r.open.turn = slot
		}
		return nil
	}
	var one int
	var seq int64
	if err := br.QueryRow().Scan(&one, &seq); err != nil {
		return err
	}
	r.open = recorded{cp: r.next, rowSeq: seq}
	r.rowHalted, r.owner.renewing = false, sent
	return nil
}

// readCheckpoint reads, in the transaction that holds the row, the newest checkpoint entry newer than the
// row's own position, when the repository does not know that its own is the newest.
func (r *Position) readCheckpoint(ctx context.Context) error {
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
	err := r.sess.tx.QueryRow(ctx, readCheckpointSQL, r.name).Scan(&at, &id, &handled, &flying, &since)
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
