package cursor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors of operator actions, for callers that branch on them.
var (
	// ErrUnknownProcess: no cursor row has the name.
	ErrUnknownProcess = errors.New("no such process")
	// ErrNotHalted: Skip was asked while the stream is not halted.
	ErrNotHalted = errors.New("the stream is not halted")
	// ErrWrongRecord: Skip was asked for a record other than the one the stream is halted on.
	ErrWrongRecord = errors.New("the stream is halted on another record")
	// ErrBusy: the cursor row stayed locked by a running batch for longer than the action would wait.
	ErrBusy = errors.New("the cursor is busy")
)

// ActionOpts says who asks for an operator action and why; both go to the audit table with the
// database role.
type ActionOpts struct {
	// Actor names the person or system acting, beside the database role. Required.
	Actor string
	// Reason says why. Required for Skip; recorded for every action.
	Reason string
	// Wait bounds how long the action waits for the cursor row while a batch holds it. Zero means 10s.
	Wait time.Duration
}

// AuditEntry is one row of inorder.audit.
type AuditEntry struct {
	ID             int64     `json:"id"`
	At             time.Time `json:"at"`
	Process        string    `json:"process"`
	Action         string    `json:"action"`
	Role           string    `json:"db_role"`
	Actor          string    `json:"actor"`
	Reason         string    `json:"reason"`
	RecordID       string    `json:"record_id,omitempty"`
	PositionBefore *Position `json:"position_before,omitempty"`
	PositionAfter  *Position `json:"position_after,omitempty"`
}

// MarshalJSON encodes a position as {"created_at": ..., "id": ...}, null parts for the beginning.
func (p Position) MarshalJSON() ([]byte, error) {
	var v struct {
		CreatedAt *time.Time `json:"created_at"`
		ID        *string    `json:"id"`
	}
	if !p.IsBeginning() {
		at := p.CreatedAt.UTC()
		v.CreatedAt = &at
		if p.ID != "" {
			v.ID = &p.ID
		}
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (p *Position) UnmarshalJSON(b []byte) error {
	var v struct {
		CreatedAt *time.Time `json:"created_at"`
		ID        *string    `json:"id"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Position{}
	if v.CreatedAt != nil {
		p.CreatedAt = v.CreatedAt.UTC()
	}
	if v.ID != nil {
		p.ID = *v.ID
	}
	return nil
}

// Skip moves the position past the record the stream is halted on, and only that record: it refuses when
// the stream is not halted (ErrNotHalted) or is halted on another record (ErrWrongRecord). record is the
// halted record's own position, which the caller looks up in the source (processor.Locate). The running
// processor goes on after it at its next batch.
func Skip(ctx context.Context, conn *pgx.Conn, name string, record Position, opts ActionOpts) (AuditEntry, error) {
	if opts.Reason == "" {
		return AuditEntry{}, fmt.Errorf("skip on %q: a reason is required", name)
	}
	return act(ctx, conn, name, "skip", record.ID, opts, func(tx pgx.Tx, st State) (*Position, error) {
		if st.Halt == nil {
			return nil, fmt.Errorf("skip record %s on %q: %w; skip only moves past a halted record", record.ID, name, ErrNotHalted)
		}
		if st.Halt.RecordID != record.ID {
			return nil, fmt.Errorf("skip record %s on %q: %w (%s)", record.ID, name, ErrWrongRecord, st.Halt.RecordID)
		}
		return &record, setOperatorPosition(ctx, tx, name, record)
	})
}

// Rewind moves the position back to to, so that the records after it are delivered again, in order. It
// clears any halt state. The caller checks that to is not ahead of the position (processor.Locate),
// since moving forward would skip records. recordID, when not empty, is recorded in the audit entry.
func Rewind(ctx context.Context, conn *pgx.Conn, name string, to Position, recordID string, opts ActionOpts) (AuditEntry, error) {
	return act(ctx, conn, name, "rewind", recordID, opts, func(tx pgx.Tx, st State) (*Position, error) {
		return &to, setOperatorPosition(ctx, tx, name, to)
	})
}

// Pause stops the process at its next batch (within one poll interval when idle) until Resume.
func Pause(ctx context.Context, conn *pgx.Conn, name string, opts ActionOpts) (AuditEntry, error) {
	return setPaused(ctx, conn, name, true, opts)
}

// Resume lets a paused process go on.
func Resume(ctx context.Context, conn *pgx.Conn, name string, opts ActionOpts) (AuditEntry, error) {
	return setPaused(ctx, conn, name, false, opts)
}

func setPaused(ctx context.Context, conn *pgx.Conn, name string, paused bool, opts ActionOpts) (AuditEntry, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	return act(ctx, conn, name, action, "", opts, func(tx pgx.Tx, st State) (*Position, error) {
		_, err := tx.Exec(ctx, "UPDATE inorder.cursor SET paused = $2 WHERE process_name = $1", name, paused)
		return nil, err
	})
}

func setOperatorPosition(ctx context.Context, tx pgx.Tx, name string, pos Position) error {
	args := posArgs(pos)
	_, err := tx.Exec(ctx, `
		UPDATE inorder.cursor
		SET position_created_at = $2, position_id = $3,
		    halted_record_id = NULL, halted_error = NULL, halted_attempts = 0,
		    halted_first_failure_at = NULL, halted_last_failure_at = NULL
		WHERE process_name = $1`, name, args[0], args[1])
	return err
}

// act runs an operator action: it locks the cursor row (waiting at most opts.Wait for a running batch to
// end), applies change, and writes the audit entry, all in one transaction.
func act(ctx context.Context, conn *pgx.Conn, name, action, recordID string, opts ActionOpts,
	change func(tx pgx.Tx, st State) (*Position, error)) (AuditEntry, error) {
	if opts.Actor == "" {
		return AuditEntry{}, fmt.Errorf("%s on %q: an actor is required", action, name)
	}
	wait := opts.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: %w", action, name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: %w", action, name, err)
	}
	r := &Repository{name: name}
	ok, err := r.scanLock(tx.QueryRow(ctx, `
		SELECT position_created_at, position_id, halted_record_id, halted_error, halted_attempts,
		       halted_first_failure_at, halted_last_failure_at, paused
		FROM inorder.cursor WHERE process_name = $1 FOR UPDATE`, name))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return AuditEntry{}, fmt.Errorf("%s on %q: %w: a batch held the cursor row for over %s; try again or wait longer",
			action, name, ErrBusy, wait)
	}
	if err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: %w", action, name, err)
	}
	if !ok {
		return AuditEntry{}, fmt.Errorf("%s on %q: %w", action, name, ErrUnknownProcess)
	}
	before := r.state.Position
	after, err := change(tx, r.state)
	if err != nil {
		return AuditEntry{}, err
	}
	e := AuditEntry{Process: name, Action: action, Actor: opts.Actor, Reason: opts.Reason, RecordID: recordID,
		PositionBefore: &before, PositionAfter: after}
	var rec *string
	if recordID != "" {
		rec = &recordID
	}
	var afterJSON any
	if after != nil {
		afterJSON = after
	}
	if err := tx.QueryRow(ctx, `
		INSERT INTO inorder.audit (process_name, action, actor, reason, record_id, position_before, position_after)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING id, at, db_role`, name, action, opts.Actor, opts.Reason, rec, before, afterJSON).
		Scan(&e.ID, &e.At, &e.Role); err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: write audit: %w", action, name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: commit: %w", action, name, err)
	}
	return e, nil
}

// Audit lists the audit entries of process name (all processes when empty), newest first, at most limit.
func Audit(ctx context.Context, conn *pgx.Conn, name string, limit int) ([]AuditEntry, error) {
	rows, err := conn.Query(ctx, `
		SELECT id, at, process_name, action, db_role, actor, reason, coalesce(record_id, ''),
		       position_before, position_after
		FROM inorder.audit WHERE $1 = '' OR process_name = $1
		ORDER BY id DESC LIMIT $2`, name, limit)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Process, &e.Action, &e.Role, &e.Actor, &e.Reason, &e.RecordID,
			&e.PositionBefore, &e.PositionAfter)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	return entries, nil
}

// ErrPartitionsChanged is returned by RegisterPartitioned when the process is already split another way.
var ErrPartitionsChanged = errors.New("the process has another number of partitions")

// RegisterPartitioned records that process name is split into n partitions, or checks that it is. A
// different number, or a process that already ran as one stream, is refused: changing the split is an
// explicit operation (drain, then Repartition), since positions do not carry over between splits.
func RegisterPartitioned(ctx context.Context, conn *pgx.Conn, name string, n int) error {
	if _, err := conn.Exec(ctx, `INSERT INTO inorder.cursor (process_name, partitions) VALUES ($1, $2)
		ON CONFLICT (process_name) DO NOTHING`, name, n); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	var have *int32
	var ran bool
	if err := conn.QueryRow(ctx, `SELECT partitions, source_table IS NOT NULL FROM inorder.cursor WHERE process_name = $1`,
		name).Scan(&have, &ran); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	switch {
	case have == nil && ran:
		return fmt.Errorf("%w: it runs as one stream; to split it, stop it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, name, n)
	case have == nil:
		_, err := conn.Exec(ctx, "UPDATE inorder.cursor SET partitions = $2 WHERE process_name = $1 AND partitions IS NULL", name, n)
		return err
	case int(*have) != n:
		return fmt.Errorf("%w: it has %d, asked for %d; drain it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, *have, n, name, n)
	}
	return nil
}

// InstancesLockKey is the key of the advisory lock that every running instance of partitioned process
// name holds shared on its coordinating connection, from before it checks the partition count until it
// stops. Repartition takes it exclusively: an instance between two partitions owns none of their locks,
// but holds this one.
func InstancesLockKey(name string) int64 { return LockKey(name + "#instances") }

// Repartition splits process name into n partitions anew, every one starting at at: it replaces the
// cursor rows of the old partitions (or the single stream's position) in one transaction, audited. The
// caller checks first that nothing is behind, halted or owned, and that no writer is in flight, so that
// at (the last row of the source) is where every old stream stands. A running instance makes it fail
// with ErrBusy rather than wait: it holds the process's instances lock (see InstancesLockKey), and a
// processor in a batch holds its partition's row, which is locked with NOWAIT.
func Repartition(ctx context.Context, conn *pgx.Conn, name string, n int, at Position, opts ActionOpts) (AuditEntry, error) {
	if n < 1 {
		return AuditEntry{}, fmt.Errorf("repartition %q: at least 1 partition, got %d", name, n)
	}
	return act(ctx, conn, name, "repartition", "", opts, func(tx pgx.Tx, st State) (*Position, error) {
		var idle bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", InstancesLockKey(name)).Scan(&idle); err != nil {
			return nil, fmt.Errorf("repartition %q: %w", name, err)
		}
		if !idle {
			return nil, fmt.Errorf("repartition %q: %w: an instance is running it; stop every instance first", name, ErrBusy)
		}
		rows, err := tx.Query(ctx, `SELECT process_name FROM inorder.cursor WHERE starts_with(process_name, $1 || '#')
			FOR UPDATE NOWAIT`, name)
		if err == nil {
			_, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return nil, fmt.Errorf("repartition %q: %w: a processor is working a partition; stop every instance first", name, ErrBusy)
		}
		if err != nil {
			return nil, fmt.Errorf("repartition %q: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM inorder.cursor WHERE starts_with(process_name, $1 || '#')`, name); err != nil {
			return nil, fmt.Errorf("repartition %q: %w", name, err)
		}
		args := posArgs(at)
		if _, err := tx.Exec(ctx, `
			INSERT INTO inorder.cursor (process_name, position_created_at, position_id)
			SELECT $1 || '#' || i || '/' || $2::int, $3::timestamptz, $4::text FROM generate_series(0, $2::int - 1) AS i`,
			name, n, args[0], args[1]); err != nil {
			return nil, fmt.Errorf("repartition %q: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE inorder.cursor SET partitions = $2, position_created_at = $3, position_id = $4
			WHERE process_name = $1`, name, n, args[0], args[1]); err != nil {
			return nil, fmt.Errorf("repartition %q: %w", name, err)
		}
		return &at, nil
	})
}
