package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/inordertype"
)

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
	// Halt says that the failure halts the stream, as the processor judged it (refused for good, or
	// failing for longer than its HaltAfter by the database's clock, see Repository.Now). The store records
	// the verdict; it does not judge again.
	Halt bool
	// Unavailable, when not empty, records the failure as the sink's outage (see Halt.Unavailable), which
	// never halts the stream.
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
		f.Permanent, f.Halt = false, false // the sink's, not the record's
	}
	var h inordertype.Halt
	var stored pgtype.Int4
	var haltedAt pgtype.Timestamptz
	var seq int64
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
		    -- When the record halted the stream first, if it does (the verdict is $10).
		    halted_at = CASE WHEN $10 THEN coalesce(CASE WHEN halted_record_id = $4 THEN halted_at END,
		                                            clock_timestamp()) END,
		    lease_expires_at = clock_timestamp() + $11::interval
		WHERE process_name = $1 AND owner_token = $12
		RETURNING halted_first_failure_at, halted_last_failure_at, halted_next_attempt_at, halted_status, halted_at,
		          position_seq`,
		r.name, args[0], args[1], f.RecordID, msg, attempts, f.RetryIn(attempts), f.Permanent, status, f.Halt,
		r.cfg.lease(), r.token, unavailable, r.next.Handled, n, since).
		Scan(&h.FirstFailureAt, &h.LastFailureAt, &h.NextAttemptAt, &stored, &haltedAt, &seq)
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
	r.open = recorded{cp: r.next, rowSeq: seq}
	r.rowHalted = true
	r.dirty, r.renewing = true, sent
	return h, nil
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
