package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// register registers the process as Config.Start says; with the zero Start it only looks whether the
// row is there, and leaves Missing set when it is not.
func (r *Repository) register(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if err := CheckSchema(ctx, r.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if err := checkPrivileges(ctx, r.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if r.cfg.Start.IsZero() {
		var there bool
		if err := r.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)",
			r.name).Scan(&there); err != nil {
			return fmt.Errorf("look up cursor %q: %w", r.name, pooler.Explain(err))
		}
		r.missing = !there
	} else if err := r.Register(ctx, r.cfg.Start); err != nil {
		return err
	}
	return r.heartbeat(ctx, r.conn)
}

// Missing reports that the process had no cursor row when the repository was opened with the zero Start,
// and has not been registered since: the caller decides where it starts and calls Register.
func (r *Repository) Missing() bool { return r.missing }

// Register creates the process's cursor row at start, unless it exists (another instance registered it
// meanwhile: its position stands).
func (r *Repository) Register(ctx context.Context, start inordertype.StartFrom) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if start.IsZero() {
		return fmt.Errorf("register cursor %q: no start given", r.name)
	}
	if err := r.attach(ctx); err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, err)
	}
	var at any
	if t := start.Time(); !t.IsZero() {
		at = t.Add(-time.Microsecond) // after every row created before start.Time()
	}
	tag, err := r.conn.Exec(ctx, `
		INSERT INTO inorder.cursor (process_name, position_created_at)
		VALUES ($1, CASE WHEN $2 THEN clock_timestamp() ELSE $3::timestamptz END)
		ON CONFLICT (process_name) DO NOTHING`, r.name, start.IsNow(), at)
	if err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, pooler.Explain(err))
	}
	r.registered = r.registered || tag.RowsAffected() == 1
	r.missing = false
	return nil
}

// Created reports whether this repository created the process's cursor row (Register inserted it, rather
// than finding that another instance had), and nothing has removed it since.
func (r *Repository) Created() bool { return r.registered }

// heartbeatSQL says that this instance runs the process, for a lease from now: status counts such rows,
// and forget refuses while one is live.
const heartbeatSQL = `
	INSERT INTO inorder.instance (process_name, instance, seen_until)
	VALUES ($1, $2, clock_timestamp() + $3::interval)
	ON CONFLICT (process_name, instance) DO UPDATE SET seen_until = EXCLUDED.seen_until`

// heartbeat renews this instance's row in inorder.instance on q (the connection, or the open cursor
// transaction) when a third of its lease has passed since the last time.
func (r *Repository) heartbeat(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if time.Since(r.beat) < r.cfg.lease()/3 {
		return nil
	}
	if _, err := q.Exec(ctx, heartbeatSQL, r.name, r.instance(), r.cfg.lease()); err != nil {
		return fmt.Errorf("cursor %q: say the instance is there: %w", r.name, pooler.Explain(err))
	}
	r.beat = time.Now()
	return nil
}

// Unregister deletes the cursor row this repository created, when nothing has used it since: no instance
// has locked it to work (which records the source), nor moved, paused or halted it, and no other instance
// of the process runs (says so in inorder.instance). A processor whose start-up checks fail calls it, so that a wrong column or a
// missing index leaves no process behind for status to show. It does nothing otherwise.
func (r *Repository) Unregister(ctx context.Context) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if !r.registered || r.tx != nil {
		return nil
	}
	if err := r.attach(ctx); err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	defer r.Detach()
	if r.conn == nil || r.conn.IsClosed() {
		return nil
	}
	_, err := r.conn.Exec(ctx, `
		DELETE FROM inorder.cursor c
		WHERE process_name = $1 AND source_table IS NULL AND records_handled = 0 AND NOT paused
		  AND halted_record_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM inorder.audit a WHERE a.process_name = c.process_name)
		  AND NOT EXISTS (SELECT 1 FROM inorder.instance i
		                  WHERE i.process_name = c.process_name AND i.instance <> $2
		                    AND i.seen_until > clock_timestamp())`, r.name, r.instance())
	if err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	r.registered = false
	return nil
}

// SetSource records which table and columns the process reads (Table qualified), its filter (Where) and
// the horizon that orders its position, so status can measure what is behind. It returns the source the row recorded before
// when this changed it (the zero Source when it recorded none: a process that never ran), and changed
// false when the row already said the same.
func (r *Repository) SetSource(ctx context.Context, src inordertype.Source) (before inordertype.Source, changed bool, err error) {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return before, false, fmt.Errorf("set source of cursor %q: %w", r.name, ErrNotLocked)
	}
	var part, parts any
	if src.Partition != nil {
		part, parts = src.Partition.Index, src.Partition.Count
	}
	// One statement: what the rows said before (the snapshot both writes start from), the cursor row's
	// source, and the horizon in inorder.source_state (migration 14), each written only when it changes.
	var n int
	err = r.tx.QueryRow(ctx, `
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
	r.dirty = true
	return before, true, nil
}

// AddLate counts n rows found committed behind the position after the process passed them.
func (r *Repository) AddLate(ctx context.Context, n int64) error {
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	if r.tx == nil {
		return fmt.Errorf("count late rows of cursor %q: %w", r.name, ErrNotLocked)
	}
	if _, err := r.tx.Exec(ctx, `INSERT INTO inorder.source_state AS s (process_name, late_rows, late_at)
		VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (process_name) DO UPDATE SET late_rows = s.late_rows + excluded.late_rows, late_at = excluded.late_at`,
		r.name, n); err != nil {
		return fmt.Errorf("count late rows of cursor %q: %w", r.name, err)
	}
	r.dirty = true
	return nil
}
