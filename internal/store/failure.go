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

// Failure is the completion of a failing record: everything the cursor row is to say of it, decided
// by the processor (its verdict, the attempts counted, the wait before the next attempt). RecordFailure
// writes it as it is: it counts nothing again, judges nothing again, and calls nothing back.
type Failure struct {
	// RecordID is the id of the record that failed.
	RecordID string
	// Error is what the handler returned, as stored: at most MaxErrorLen bytes (see ClipError).
	Error string
	// Attempts counts the record's failed attempts as the failing record, this one included.
	Attempts int
	// Permanent and Status are as in Halt.
	Permanent bool
	Status    int
	// RetryIn is how long after this failure, by the database's clock, the record is tried again: the
	// next attempt is the failure's time, stamped by the statement that writes it, plus RetryIn.
	RetryIn time.Duration
	// Halt says that the failure halts the stream (refused for good, or failing for longer than HaltAfter
	// by the database's clock, see Lease.Now).
	Halt bool
	// Unavailable, when not empty, records the failure as the sink's outage (see Halt.Unavailable).
	Unavailable string
}

// RecordFailure stores f, the completion of a failing record, in the open transaction, together with the
// position of the last record that succeeded. Unlock makes it durable.
//
// Every time the statement stamps is one reading of the database's clock: the failure's, from which the
// next attempt is RetryIn on, so that the returned Halt's NextAttemptAt less its LastFailureAt is f.RetryIn
// exactly, and a wait for the next attempt needs no other clock.
func (r *Position) RecordFailure(ctx context.Context, pos inordertype.Position, f Failure) (inordertype.Halt, error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return inordertype.Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, ErrNotLocked)
	}
	r.next.Position = pos
	args := positionArgs(r.next.Position)
	n, since := r.next.InFlight.args()
	status := nullStatus(f.Status)
	var unavailable *string
	if f.Unavailable != "" {
		unavailable = &f.Unavailable
	}
	var h inordertype.Halt
	var stored pgtype.Int4
	var haltedAt pgtype.Timestamptz
	var seq int64
	sent := time.Now()
	// The position goes into the row, numbered anew, with the halt state: the checkpoint of the last record
	// that succeeded, which the halt state stands beside.
	err := r.sess.tx.QueryRow(ctx, `
		UPDATE inorder.cursor
		SET position_created_at = $2, position_id = $3, position_seq = nextval('inorder.checkpoint_seq'),
		    records_handled = $14, in_flight = $15, in_flight_since = $16,
		    halted_attempts = $6,
		    halted_first_failure_at = CASE WHEN halted_record_id = $4 THEN halted_first_failure_at
		                                   ELSE failed.at END,
		    halted_last_failure_at = failed.at,
		    halted_next_attempt_at = failed.at + $7::interval,
		    halted_record_id = $4,
		    halted_error = $5,
		    halted_permanent = $8,
		    halted_status = $9,
		    halted_unavailable = $13::text,
		    -- When the record halted the stream first, if it does (the verdict is $10).
		    halted_at = CASE WHEN $10 THEN coalesce(CASE WHEN halted_record_id = $4 THEN halted_at END,
		                                            failed.at) END,
		    lease_expires_at = clock_timestamp() + $11::interval
		FROM (SELECT clock_timestamp() AS at) failed
		WHERE process_name = $1 AND owner_token = $12
		RETURNING halted_first_failure_at, halted_last_failure_at, halted_next_attempt_at, halted_status, halted_at,
		          position_seq`,
		r.name, args[0], args[1], f.RecordID, f.Error, f.Attempts, f.RetryIn, f.Permanent, status, f.Halt,
		r.cfg.lease(), r.owner.token, unavailable, r.next.Handled, n, since).
		Scan(&h.FirstFailureAt, &h.LastFailureAt, &h.NextAttemptAt, &stored, &haltedAt, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrFenced
	}
	if err != nil {
		return inordertype.Halt{}, fmt.Errorf("record failure on cursor %q: %w", r.name, err)
	}
	h.RecordID, h.Error, h.Attempts, h.Permanent, h.Status = f.RecordID, f.Error, f.Attempts, f.Permanent, int(stored.Int32)
	h.Unavailable = f.Unavailable
	h.HaltedAt = haltedAt.Time
	r.state = inordertype.State{Position: pos, Halt: &h, Paused: r.state.Paused, RedriveRequestedAt: r.state.RedriveRequestedAt}
	r.open = recorded{cp: r.next, rowSeq: seq}
	r.rowHalted = true
	r.sess.dirty, r.owner.renewing = true, sent
	return h, nil
}
