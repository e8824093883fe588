package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/pooler"
)

// register registers the process as Config.Start says, and says that this instance is there (see
// heartbeat), in one bounded exchange.
func (r *Repository) register(ctx context.Context) error {
	ctx, cancel := r.Session.bounded(ctx)
	defer cancel()
	if err := r.Registration.register(ctx); err != nil {
		return err
	}
	return r.Lease.heartbeat(ctx, r.Session.conn)
}

// Registration is the process's cursor row as this repository found it at Open: whether it was there,
// and whether this repository created it.
type Registration struct {
	name string
	cfg  Config
	sess *Session
	// registered says this repository created the row (rather than finding it), so that Unregister
	// may remove it while nothing has used it.
	registered bool
	missing    bool // opened with the zero Start, and the row is not there (see Missing)
}

// register registers the process as Config.Start says; with the zero Start it only looks whether the
// row is there, and leaves Missing set when it is not. ctx bounds the exchange (see Repository.register).
func (r *Registration) register(ctx context.Context) error {
	if err := CheckSchema(ctx, r.sess.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if err := checkPrivileges(ctx, r.sess.conn); err != nil {
		return fmt.Errorf("open cursor %q: %w", r.name, err)
	}
	if r.cfg.Start.IsZero() {
		var there bool
		if err := r.sess.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)",
			r.name).Scan(&there); err != nil {
			return fmt.Errorf("look up cursor %q: %w", r.name, pooler.Explain(err))
		}
		r.missing = !there
	} else if err := r.Register(ctx, r.cfg.Start); err != nil {
		return err
	}
	return nil
}

// Missing reports that the process had no cursor row when the repository was opened with the zero Start,
// and has not been registered since: the caller decides where it starts and calls Register.
func (r *Registration) Missing() bool { return r.missing }

// Register creates the process's cursor row at start, unless it exists (another instance registered it
// meanwhile: its position stands).
func (r *Registration) Register(ctx context.Context, start inordertype.StartFrom) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if start.IsZero() {
		return fmt.Errorf("register cursor %q: no start given", r.name)
	}
	if err := r.sess.attach(ctx); err != nil {
		return fmt.Errorf("register cursor %q: %w", r.name, err)
	}
	var at any
	if t := start.Time(); !t.IsZero() {
		at = t.Add(-time.Microsecond) // after every row created before start.Time()
	}
	tag, err := r.sess.conn.Exec(ctx, `
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
func (r *Registration) Created() bool { return r.registered }

// heartbeatSQL says that this instance runs the process, for a lease from now: status counts such rows,
// and forget refuses while one is live.
const heartbeatSQL = `
	INSERT INTO inorder.instance (process_name, instance, seen_until)
	VALUES ($1, $2, clock_timestamp() + $3::interval)
	ON CONFLICT (process_name, instance) DO UPDATE SET seen_until = EXCLUDED.seen_until`

// heartbeat renews this instance's row in inorder.instance on q (the connection, or the open cursor
// transaction) when a third of its lease has passed since the last time.
func (r *Lease) heartbeat(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if time.Since(r.beat) < r.cfg.lease()/3 {
		return nil
	}
	if _, err := q.Exec(ctx, heartbeatSQL, r.name, instanceName(r.cfg), r.cfg.lease()); err != nil {
		return fmt.Errorf("cursor %q: say the instance is there: %w", r.name, pooler.Explain(err))
	}
	r.beat = time.Now()
	return nil
}

// Unregister deletes the cursor row this repository created, when nothing has used it since: no instance
// has locked it to work (which records the source), nor moved, paused or halted it, and no other instance
// of the process runs (says so in inorder.instance). A processor whose start-up checks fail calls it, so that a wrong column or a
// missing index leaves no process behind for status to show. It does nothing otherwise.
func (r *Registration) Unregister(ctx context.Context) error {
	ctx, cancel := r.sess.bounded(ctx)
	defer cancel()
	if !r.registered || r.sess.tx != nil {
		return nil
	}
	if err := r.sess.attach(ctx); err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	defer r.sess.Detach()
	if r.sess.conn == nil || r.sess.conn.IsClosed() {
		return nil
	}
	_, err := r.sess.conn.Exec(ctx, `
		DELETE FROM inorder.cursor c
		WHERE process_name = $1 AND source_table IS NULL AND records_handled = 0 AND NOT paused
		  AND halted_record_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM inorder.audit a WHERE a.process_name = c.process_name)
		  AND NOT EXISTS (SELECT 1 FROM inorder.instance i
		                  WHERE i.process_name = c.process_name AND i.instance <> $2
		                    AND i.seen_until > clock_timestamp())`, r.name, instanceName(r.cfg))
	if err != nil {
		return fmt.Errorf("unregister cursor %q: %w", r.name, err)
	}
	r.registered = false
	return nil
}
