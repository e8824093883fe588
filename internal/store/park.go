package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/inordertype"
)

// Parked is a record parked in its stream (see migration 11): the key's first, which failed (Error set),
// or one parked behind it. Park and RedriveFailed write it as the processor built it: the error as stored
// (ClipError), the attempts as counted.
type Parked struct {
	Key       string
	Position  inordertype.Position
	Error     string
	Status    int
	Permanent bool
	Attempts  int
	// FirstFailureAt is when the record first failed; zero for a record parked behind another.
	FirstFailureAt time.Time
}

// MaxErrorLen bounds the error text stored with a failing or parked record.
const MaxErrorLen = 4000

// ClipError cuts an error text to MaxErrorLen, marking the cut.
func ClipError(msg string) string {
	if len(msg) > MaxErrorLen {
		return msg[:MaxErrorLen] + "…"
	}
	return msg
}

// nullStatus is a sink's status code as a parameter: NULL when the sink gave none.
func nullStatus(code int) any {
	if code == 0 {
		return nil
	}
	return code
}

// Parking is a process's parked records (inorder.parked): parking one in the open transaction, and the
// redrives an operator asks for.
type Parking struct {
	name string
	sess *Session
	pos  *Position
}

// Park stores a parked record in the open transaction; it commits with the position that moves past it.
// Parking a record again (delivered again after a crash) changes nothing.
func (r *Parking) Park(ctx context.Context, p Parked) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("park record %s on cursor %q: %w", p.Position.ID, r.name, ErrNotLocked)
	}
	status, first := nullStatus(p.Status), any(nil)
	if !p.FirstFailureAt.IsZero() {
		first = p.FirstFailureAt
	}
	_, err := r.sess.tx.Exec(ctx, `
		INSERT INTO inorder.parked (process_name, key, record_created_at, record_id, error, status, permanent,
		                            attempts, first_failure_at, last_failure_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9, CASE WHEN $5 <> '' THEN clock_timestamp() END),
		        CASE WHEN $5 <> '' THEN clock_timestamp() END)
		ON CONFLICT DO NOTHING`,
		r.name, p.Key, p.Position.CreatedAt, p.Position.ID, p.Error, status, p.Permanent, p.Attempts, first)
	if err != nil {
		return fmt.Errorf("park record %s on cursor %q: %w", p.Position.ID, r.name, err)
	}
	r.sess.dirty = true
	return nil
}

// MayPark reports whether the role may read and write parked records (migration 11 grants it to the
// roles that could update cursor rows before it; a role granted by hand since may lack it).
func (r *Parking) MayPark(ctx context.Context) (read, write bool, err error) {
	if err := r.sess.attach(ctx); err != nil {
		return false, false, fmt.Errorf("check the privileges on inorder.parked: %w", err)
	}
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	err = r.sess.conn.QueryRow(ctx, `SELECT has_table_privilege('inorder.parked', 'SELECT'),
		has_table_privilege('inorder.parked', 'SELECT, INSERT, UPDATE, DELETE')`).Scan(&read, &write)
	if err != nil {
		return false, false, fmt.Errorf("check the privileges on inorder.parked: %w", err)
	}
	return read, write, nil
}

// ParkedKeys returns the keys parked in this stream.
func (r *Parking) ParkedKeys(ctx context.Context) ([]string, error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return nil, fmt.Errorf("read parked keys of cursor %q: %w", r.name, ErrNotLocked)
	}
	rows, err := r.sess.tx.Query(ctx, `SELECT DISTINCT key FROM inorder.parked WHERE process_name = $1`, r.name)
	if err == nil {
		var keys []string
		if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			return keys, nil
		}
	}
	return nil, fmt.Errorf("read parked keys of cursor %q: %w", r.name, err)
}

// RedriveQueue returns the parked records of the keys an operator asked to redrive (every record of such
// a key, marked or parked since), key by key, each key's in the stream's order.
func (r *Parking) RedriveQueue(ctx context.Context) ([]Parked, error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return nil, fmt.Errorf("read redrives of cursor %q: %w", r.name, ErrNotLocked)
	}
	rows, err := r.sess.tx.Query(ctx, `
		SELECT key, record_created_at, record_id, error, coalesce(status, 0), permanent, attempts,
		       first_failure_at
		FROM inorder.parked p
		WHERE process_name = $1 AND EXISTS (SELECT 1 FROM inorder.parked q
			WHERE q.process_name = p.process_name AND q.key = p.key AND q.redrive_at IS NOT NULL)
		ORDER BY key, seq`, r.name)
	if err == nil {
		var out []Parked
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Parked, error) {
			var p Parked
			var first pgtype.Timestamptz
			err := row.Scan(&p.Key, &p.Position.CreatedAt, &p.Position.ID, &p.Error, &p.Status, &p.Permanent,
				&p.Attempts, &first)
			p.Position.CreatedAt, p.FirstFailureAt = p.Position.CreatedAt.UTC(), first.Time
			return p, err
		})
		if err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("read redrives of cursor %q: %w", r.name, err)
}

// Unpark removes a parked record that has been delivered, in the open transaction: it commits with the
// handler's writes, if any.
func (r *Parking) Unpark(ctx context.Context, p Parked) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("unpark record %s on cursor %q: %w", p.Position.ID, r.name, ErrNotLocked)
	}
	_, err := r.sess.tx.Exec(ctx, `DELETE FROM inorder.parked
		WHERE process_name = $1 AND key = $2 AND record_created_at = $3 AND record_id = $4`,
		r.name, p.Key, p.Position.CreatedAt, p.Position.ID)
	if err != nil {
		return fmt.Errorf("unpark record %s on cursor %q: %w", p.Position.ID, r.name, err)
	}
	r.sess.dirty = true
	return nil
}

// RedriveFailed keeps a key parked whose first record failed again during its redrive: the record takes
// the new error and the attempts counted with it, and the key's redrive request ends, so that it waits
// for the next.
func (r *Parking) RedriveFailed(ctx context.Context, p Parked) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("record redrive failure on cursor %q: %w", r.name, ErrNotLocked)
	}
	status := nullStatus(p.Status)
	_, err := r.sess.tx.Exec(ctx, `
		UPDATE inorder.parked
		SET error = CASE WHEN record_created_at = $3 AND record_id = $4 THEN $5 ELSE error END,
		    status = CASE WHEN record_created_at = $3 AND record_id = $4 THEN $6 ELSE status END,
		    permanent = CASE WHEN record_created_at = $3 AND record_id = $4 THEN $7 ELSE permanent END,
		    attempts = CASE WHEN record_created_at = $3 AND record_id = $4 THEN $8 ELSE attempts END,
		    first_failure_at = CASE WHEN record_created_at = $3 AND record_id = $4
		                            THEN coalesce(first_failure_at, clock_timestamp()) ELSE first_failure_at END,
		    last_failure_at = CASE WHEN record_created_at = $3 AND record_id = $4
		                           THEN clock_timestamp() ELSE last_failure_at END,
		    redrive_at = NULL
		WHERE process_name = $1 AND key = $2`,
		r.name, p.Key, p.Position.CreatedAt, p.Position.ID, p.Error, status, p.Permanent, p.Attempts)
	if err != nil {
		return fmt.Errorf("record redrive failure on cursor %q: %w", r.name, err)
	}
	r.sess.dirty = true
	return nil
}

// RedriveSeen ends an operator's redrive request once the processor has acted on every request made up
// to seen (the RedriveRequestedAt it read); a request made since stays for the next batch.
func (r *Parking) RedriveSeen(ctx context.Context, seen time.Time) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("end redrive request on cursor %q: %w", r.name, ErrNotLocked)
	}
	if _, err := r.sess.tx.Exec(ctx, `UPDATE inorder.cursor SET redrive_requested_at = NULL
		WHERE process_name = $1 AND redrive_requested_at <= $2`, r.name, seen); err != nil {
		return fmt.Errorf("end redrive request on cursor %q: %w", r.name, err)
	}
	r.pos.state.RedriveRequestedAt = time.Time{}
	r.sess.dirty = true
	return nil
}
