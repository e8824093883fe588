package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// Source records, in the open transaction, what the process reads (its source, filter and horizon), what
// it waits for, what holds it back and the rows found late; and reads the filter it last recorded.
type Source struct {
	name string
	sess *Session
}

// SetSourceWait records in the open transaction that the stream waits for its source table to fit again
// after a migration (a column it needs dropped or renamed), saying what and what to do; an empty wait
// clears it. Status shows it (CursorRow.SourceWait); it is kept in inorder.source_state (migration 14).
func (r *Source) SetSourceWait(ctx context.Context, wait string) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, ErrNotLocked)
	}
	var w any
	if wait != "" {
		w = ClipError(wait)
	}
	tag, err := r.sess.tx.Exec(ctx, `
		INSERT INTO inorder.source_state AS s (process_name, wait) VALUES ($1, $2)
		ON CONFLICT (process_name) DO UPDATE SET wait = excluded.wait WHERE s.wait IS DISTINCT FROM excluded.wait`,
		r.name, w)
	if err != nil {
		return fmt.Errorf("set source wait of cursor %q: %w", r.name, err)
	}
	r.sess.dirty = r.sess.dirty || tag.RowsAffected() > 0
	return nil
}

// SetSource records which table and columns the process reads (Table qualified), its filter (Where) and
// the horizon that orders its position, so status can measure what is behind. It returns the source the row recorded before
// when this changed it (the zero Source when it recorded none: a process that never ran), and changed
// false when the row already said the same.
func (r *Source) SetSource(ctx context.Context, src inordertype.Source) (before inordertype.Source, changed bool, err error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return before, false, fmt.Errorf("set source of cursor %q: %w", r.name, ErrNotLocked)
	}
	var part, parts any
	if src.Partition != nil {
		part, parts = src.Partition.Index, src.Partition.Count
	}
	// One statement: what the rows said before (the snapshot both writes start from), the cursor row's
	// source, and the horizon in inorder.source_state (migration 14), each written only when it changes.
	var n int
	err = r.sess.tx.QueryRow(ctx, `
		WITH prev AS (
			SELECT coalesce(c.source_table, '') AS source_table, coalesce(s.horizon, '') AS horizon,
			       coalesce(s.filter, '') AS filter
			FROM inorder.cursor c LEFT JOIN inorder.source_state s USING (process_name) WHERE c.process_name = $1),
		src AS (
			UPDATE inorder.cursor SET source_table = $2, source_id_column = $3, source_created_at_column = $4,
			       source_key_column = $5, source_partition = $6, source_partitions = $7
			WHERE process_name = $1 AND (source_table, source_id_column, source_created_at_column, source_key_column,
			      source_partition, source_partitions) IS DISTINCT FROM ($2, $3, $4, $5, $6::int, $7::int)
			RETURNING 1),
		hz AS (
			INSERT INTO inorder.source_state AS s (process_name, horizon, filter) VALUES ($1, $8, nullif($9, ''))
			ON CONFLICT (process_name) DO UPDATE SET horizon = excluded.horizon, filter = excluded.filter
			WHERE (s.horizon, s.filter) IS DISTINCT FROM (excluded.horizon, excluded.filter)
			RETURNING 1)
		SELECT prev.source_table, prev.horizon, prev.filter, (SELECT count(*) FROM src) + (SELECT count(*) FROM hz)
		FROM prev`,
		r.name, src.Table, src.IDColumn, src.CreatedAtColumn, src.KeyColumn, part, parts, string(src.Horizon), src.Where).
		Scan(&before.Table, &before.Horizon, &before.Where, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return inordertype.Source{}, false, nil
	}
	if err != nil {
		return before, false, fmt.Errorf("set source of cursor %q: %w", r.name, err)
	}
	if n == 0 {
		return inordertype.Source{}, false, nil
	}
	r.sess.dirty = true
	return before, true, nil
}

// AddLate counts n rows found committed behind the position after the process passed them.
func (r *Source) AddLate(ctx context.Context, n int64) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("count late rows of cursor %q: %w", r.name, ErrNotLocked)
	}
	if _, err := r.sess.tx.Exec(ctx, `INSERT INTO inorder.source_state AS s (process_name, late_rows, late_at)
		VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (process_name) DO UPDATE SET late_rows = s.late_rows + excluded.late_rows, late_at = excluded.late_at`,
		r.name, n); err != nil {
		return fmt.Errorf("count late rows of cursor %q: %w", r.name, err)
	}
	r.sess.dirty = true
	return nil
}

// RecordedFilter reads the filter the process's cursor row recorded when it last ran: ran is false when
// the row records no source (a process that never ran, or none at all), and filter is "" for a process
// that ran without one.
func (r *Source) RecordedFilter(ctx context.Context) (filter string, ran bool, err error) {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if err := r.sess.attach(ctx); err != nil {
		return "", false, fmt.Errorf("cursor %q: %w", r.name, err)
	}
	err = r.sess.conn.QueryRow(ctx, `SELECT coalesce(s.filter, ''), c.source_table IS NOT NULL
		FROM inorder.cursor c LEFT JOIN inorder.source_state s USING (process_name)
		WHERE c.process_name = $1`, r.name).Scan(&filter, &ran)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the filter of cursor %q: %w", r.name, pooler.Explain(err))
	}
	return filter, ran, nil
}

// SetHold records which open transaction holds the stream's horizon back, by its backend pid (0 for a
// prepared transaction) and since when; a zero since clears it.
func (r *Source) SetHold(ctx context.Context, pid int, since time.Time) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if r.sess.tx == nil {
		return fmt.Errorf("set hold of cursor %q: %w", r.name, ErrNotLocked)
	}
	var p, s any
	if !since.IsZero() {
		p, s = pid, since
	}
	tag, err := r.sess.tx.Exec(ctx, `
		UPDATE inorder.cursor SET held_by_pid = $2, held_since = $3
		WHERE process_name = $1 AND (held_by_pid, held_since) IS DISTINCT FROM ($2, $3)`, r.name, p, s)
	if err != nil {
		return fmt.Errorf("set hold of cursor %q: %w", r.name, err)
	}
	r.sess.dirty = r.sess.dirty || tag.RowsAffected() > 0
	return nil
}
