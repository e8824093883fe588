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

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// Sentinel errors of operator actions, for callers that branch on them. An action's other refusals
// (a rewind ahead of the position, a repartition of a process that is not drained) say in their message
// what to do first; there is nothing for a caller to branch on.
var (
	// ErrUnknownProcess: no cursor row has the name.
	ErrUnknownProcess = errors.New("no such process")
	// ErrNotHalted: Skip or Retry was asked while the stream is neither halted nor retrying a record.
	ErrNotHalted = errors.New("the stream is not halted")
	// ErrNotPaused: Resume was asked while the stream is not paused; nothing changed.
	ErrNotPaused = errors.New("the stream is not paused")
	// ErrWrongRecord: Skip was asked for a record other than the one the stream is halted on.
	ErrWrongRecord = errors.New("the stream is halted on another record")
	// ErrNoRecord: the source has no record with the id.
	ErrNoRecord = source.ErrNoRecord
	// ErrBusy: the cursor row stayed locked by a running batch for longer than the action would wait, or
	// (for Repartition and Forget) an instance is running the process, or (for Prune) a lock it needs
	// stayed held for longer than it would wait.
	ErrBusy = errors.New("the cursor is busy")
)

// The refusals of operator actions that say what to fix.
var (
	// errForward: Rewind was asked for a place ahead of the position; moving there would skip the records
	// in between.
	errForward = errors.New("it is ahead of the position")
	// errNeverRan: the process has never run, so its source is unknown.
	errNeverRan = errors.New("the process has never run")
	// errNotDrained: Repartition was asked while a stream of the process is halted or has records behind
	// its position.
	errNotDrained = errors.New("the process is not drained")
	// errInFlight: Repartition was asked while transactions that could still add rows before the new
	// partitions' start are open.
	errInFlight = errors.New("transactions are in flight on the source")
)

// DB is what operator actions and status run on: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx. Each action
// runs in one transaction of its own (a savepoint inside a pgx.Tx).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

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

// AuditEntry is one entry of the audit trail (migration 2).
type AuditEntry struct {
	ID             int64                 `json:"id"`
	At             time.Time             `json:"at"`
	Process        string                `json:"process"`
	Action         string                `json:"action"`
	Role           string                `json:"db_role"`
	Actor          string                `json:"actor"`
	Reason         string                `json:"reason"`
	RecordID       string                `json:"record_id,omitempty"`
	PositionBefore *inordertype.Position `json:"position_before,omitempty"`
	PositionAfter  *inordertype.Position `json:"position_after,omitempty"`
	// Detail says what Prune and Forget did beyond a position; nil for the other actions.
	Detail *AuditDetail `json:"detail,omitempty"`
}

// AuditDetail is what an action did beyond moving a position, kept with its audit entry (migration 7).
type AuditDetail struct {
	// Table is the source table: the one Prune deleted from, or the one a forgotten process read
	// (schema-qualified; empty for a process that never ran).
	Table string `json:"table,omitempty"`
	// Rows counts the rows Prune deleted, in every batch committed so far: each batch updates it in its
	// own transaction, so it is exact even for a prune that was interrupted.
	Rows int64 `json:"rows,omitempty"`
	// Through is the last row Prune deleted, in (created_at, id) order.
	Through *inordertype.Position `json:"through,omitempty"`
	// Before is Prune's cut-off: only rows created before it were deleted.
	Before *time.Time `json:"before,omitempty"`
	// Streams are the cursor rows Forget removed (the process's own and its partitions'), with the
	// position each held.
	Streams []StreamPosition `json:"streams,omitempty"`
	// Keys are the parked keys Redrive asked for, with their records; for a Skip of a parked record, its
	// key and the records left behind it (Through is then the record dropped).
	Keys []ParkedCount `json:"keys,omitempty"`
}

// StreamPosition is one cursor row and its position.
type StreamPosition struct {
	Process  string               `json:"process"`
	Position inordertype.Position `json:"position"`
}

// Skip moves the position past the record the stream is halted on, and only that record: it refuses when
// the stream is not halted (ErrNotHalted) or is halted on another record (ErrWrongRecord). It is the only
// action that moves a position past an undelivered record, and it needs a reason. The running processor
// goes on after it at its next batch.
//
// Skip also drops the first parked record of a key (see Parked): the rest of the key is then redriven, or
// the key unparked when nothing is left. It refuses a record parked behind another (ErrNotParked).
func Skip(ctx context.Context, db DB, name, recordID string, opts ActionOpts) (AuditEntry, error) {
	if opts.Reason == "" {
		return AuditEntry{}, fmt.Errorf("skip on %q: a reason is required", name)
	}
	return act(ctx, db, name, "skip", opts, func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*inordertype.Position, error) {
		fail := func(err error) (*inordertype.Position, error) {
			return nil, fmt.Errorf("skip record %s on %q: %w", recordID, name, err)
		}
		e.RecordID = recordID
		halt := row.State.Halt
		if halt == nil || halt.RecordID != recordID {
			// The first parked record of a key: dropped, and the rest of the key redriven.
			if found, err := skipParked(ctx, tx, row, recordID, e); found || err != nil {
				if err != nil {
					return fail(err)
				}
				return nil, nil
			}
		}
		if halt == nil {
			return nil, fmt.Errorf("skip record %s on %q: %w; skip only moves past a halted record", recordID, name, ErrNotHalted)
		}
		if halt.RecordID != recordID {
			return nil, fmt.Errorf("skip record %s on %q: %w (%s)", recordID, name, ErrWrongRecord, halt.RecordID)
		}
		t, err := row.table(ctx, tx)
		if err != nil {
			return fail(err)
		}
		loc, err := t.Locate(ctx, tx, recordID, row.State.Position)
		if err != nil {
			return fail(err)
		}
		to := loc.Record
		return &to, store.MovePosition(ctx, tx, name, to)
	})
}

// skipParked drops recordID, the first parked record of its key, in the skip's transaction, and asks the
// owning processor to redrive the rest of the key (or, when nothing is left, to unpark it). It reports
// false when no stream of the process has recordID parked.
func skipParked(ctx context.Context, tx pgx.Tx, row cursorRow, recordID string, e *AuditEntry) (bool, error) {
	rec, found, err := store.FindParked(ctx, tx, row.Streams(), recordID)
	if err != nil || !found {
		return false, busyStreams(err)
	}
	if !rec.Head {
		return true, fmt.Errorf("%w: record %s is parked behind the first record of key %q; skip that one, or redrive the key",
			ErrNotParked, recordID, rec.Key)
	}
	left, err := store.DropParkedHead(ctx, tx, rec)
	if err != nil {
		return true, err
	}
	pos := rec.Position
	e.Detail = &AuditDetail{Keys: []ParkedCount{{Key: rec.Key, Records: left}}, Through: &pos}
	return true, nil
}

// RewindTarget says where Rewind moves a position back to: set exactly one field.
type RewindTarget struct {
	// RecordID delivers again from this record, inclusive.
	RecordID string
	// Time delivers again from the first record created at or after it.
	Time time.Time
}

// Rewind moves the position back so that the records from the target on are delivered again, in order.
// It refuses a target ahead of the position: moving forward would skip the records in
// between, which only Skip may do, one halted record at a time. It clears any halt state.
func Rewind(ctx context.Context, db DB, name string, to RewindTarget, opts ActionOpts) (AuditEntry, error) {
	if (to.RecordID == "") == to.Time.IsZero() {
		return AuditEntry{}, fmt.Errorf("rewind %q: give exactly one of a record id and a time", name)
	}
	return act(ctx, db, name, "rewind", opts, func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*inordertype.Position, error) {
		e.RecordID = to.RecordID
		// Wait for a prune batch in progress, and keep the next from starting until this commits: the
		// batch then sees the new position, or this sees what the batch deleted.
		if err := holdOffPrune(ctx, tx); err != nil {
			return nil, fmt.Errorf("rewind %q: %w", name, err)
		}
		cur := row.State.Position
		if to.Time.IsZero() {
			t, err := row.table(ctx, tx)
			if err != nil {
				return nil, fmt.Errorf("rewind %q: %w", name, err)
			}
			loc, err := t.Locate(ctx, tx, to.RecordID, cur)
			if err != nil {
				return nil, fmt.Errorf("rewind %q: %w", name, err)
			}
			if loc.Ahead {
				return nil, fmt.Errorf("rewind %q to record %s: %w, and moving there would skip the records in between; "+
					"rewind only moves back", name, to.RecordID, errForward)
			}
			back := loc.Before
			return &back, store.MovePosition(ctx, tx, name, back)
		}
		// The position just before the time: every record created at or after it is delivered again.
		back := inordertype.Position{CreatedAt: to.Time.UTC().Add(-time.Microsecond)}
		if cur.IsBeginning() || !back.CreatedAt.Before(cur.CreatedAt) {
			return nil, fmt.Errorf("rewind %q to %s: %w (%s); rewind only moves back", name,
				to.Time.UTC().Format(time.RFC3339Nano), errForward, cur)
		}
		return &back, store.MovePosition(ctx, tx, name, back)
	})
}

// Pause stops the process at its next batch (within one poll interval when idle) until Resume.
func Pause(ctx context.Context, db DB, name string, opts ActionOpts) (AuditEntry, error) {
	return setPaused(ctx, db, name, true, opts)
}

// Resume lets a paused process go on.
func Resume(ctx context.Context, db DB, name string, opts ActionOpts) (AuditEntry, error) {
	return setPaused(ctx, db, name, false, opts)
}

func setPaused(ctx context.Context, db DB, name string, paused bool, opts ActionOpts) (AuditEntry, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	return act(ctx, db, name, action, opts, func(tx pgx.Tx, row cursorRow, _ *AuditEntry) (*inordertype.Position, error) {
		if !paused && !row.State.Paused {
			// An audit entry for doing nothing would only mislead whoever reads the trail.
			return nil, fmt.Errorf("resume %q: %w; nothing changed", name, ErrNotPaused)
		}
		return nil, store.SetPaused(ctx, tx, name, paused)
	})
}

// Retry ends the backoff of a stream that is retrying or halted on a record: the running processor tries
// the record again at once (within a probe interval), as after its own backoff, without waiting the rest
// of it. Use it once the sink or the record is fixed. It refuses a stream that is not failing
// (ErrNotHalted). The record's attempts count on.
func Retry(ctx context.Context, db DB, name string, opts ActionOpts) (AuditEntry, error) {
	return act(ctx, db, name, "retry", opts, func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*inordertype.Position, error) {
		if row.State.Halt == nil {
			return nil, fmt.Errorf("retry %q: %w: it is not retrying a record either; nothing to retry", name, ErrNotHalted)
		}
		e.RecordID = row.State.Halt.RecordID
		return nil, store.RetryNow(ctx, tx, name)
	})
}

// cursorRow is a process's cursor row as an action reads it, locked: its state, the source it last ran
// against, and, on the parent row of a partitioned process, how many partitions it has.
type cursorRow struct{ store.ActionRow }

// table resolves the row's source in the catalog.
func (r cursorRow) table(ctx context.Context, q source.Querier) (*source.Table, error) {
	if r.Source.Table == "" {
		return nil, fmt.Errorf("%w, so its source is unknown", errNeverRan)
	}
	return source.Inspect(ctx, q, r.Source)
}

// act runs an operator action: it locks the cursor row (waiting at most opts.Wait for a running batch to
// end), checks and applies change, and writes the audit entry, all in one transaction. change returns
// the new position, if it moved one, and fills in what else the entry says (the record it acted on).
func act(ctx context.Context, db DB, name, action string, opts ActionOpts,
	change func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*inordertype.Position, error)) (AuditEntry, error) {
	tx, err := beginAction(ctx, db, name, action, opts)
	if err != nil {
		return AuditEntry{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	row, err := lockRow(ctx, tx, name, action, opts)
	if err != nil {
		return AuditEntry{}, err
	}
	before := row.State.Position
	e := AuditEntry{Process: name, Action: action, Actor: opts.Actor, Reason: opts.Reason, PositionBefore: &before}
	if e.PositionAfter, err = change(tx, row, &e); err != nil {
		return AuditEntry{}, err
	}
	if err := insertAudit(ctx, tx, &e); err != nil {
		return AuditEntry{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return AuditEntry{}, fmt.Errorf("%s on %q: commit: %w", action, name, err)
	}
	return e, nil
}

// wait is how long an action waits for a lock: opts.Wait, or 10s.
func (o ActionOpts) wait() time.Duration {
	if o.Wait <= 0 {
		return 10 * time.Second
	}
	return o.Wait
}

// beginAction checks that an actor is named and begins the action's transaction, its lock_timeout set to
// how long the action may wait.
func beginAction(ctx context.Context, db DB, name, action string, opts ActionOpts) (pgx.Tx, error) {
	if opts.Actor == "" {
		return nil, fmt.Errorf("%s on %q: an actor is required", action, name)
	}
	tx, err := beginWaiting(ctx, db, opts.wait())
	if err != nil {
		return nil, fmt.Errorf("%s on %q: %w", action, name, err)
	}
	return tx, nil
}

// beginWaiting begins a transaction whose lock_timeout is wait.
func beginWaiting(ctx context.Context, db DB, wait time.Duration) (pgx.Tx, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// lockRow locks and reads process name's cursor row for an action, waiting for a running batch within
// the transaction's lock_timeout.
func lockRow(ctx context.Context, tx pgx.Tx, name, action string, opts ActionOpts) (cursorRow, error) {
	row, ok, err := store.LockForAction(ctx, tx, name)
	if isLockTimeout(err) {
		return cursorRow{}, fmt.Errorf("%s on %q: %w: a batch held the cursor row for over %s; try again or wait longer",
			action, name, ErrBusy, opts.wait())
	}
	if err != nil {
		return cursorRow{}, fmt.Errorf("%s on %q: %w", action, name, err)
	}
	if !ok {
		return cursorRow{}, fmt.Errorf("%s on %q: %w", action, name, ErrUnknownProcess)
	}
	return cursorRow{row}, nil
}

// isLockTimeout reports whether err is Postgres giving up on a lock: after lock_timeout, or at once for
// NOWAIT.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// insertAudit writes e to the audit trail and fills in its id, time and database role.
func insertAudit(ctx context.Context, tx pgx.Tx, e *AuditEntry) error {
	a := store.Audit{Process: e.Process, Action: e.Action, Actor: e.Actor, Reason: e.Reason,
		RecordID: e.RecordID, Before: e.PositionBefore, After: e.PositionAfter}
	if e.Detail != nil {
		a.Detail = e.Detail
	}
	stamp, err := store.WriteAudit(ctx, tx, a)
	if err != nil {
		return fmt.Errorf("%s on %q: write audit: %w", e.Action, e.Process, err)
	}
	e.ID, e.At, e.Role = stamp.ID, stamp.At, stamp.Role
	return nil
}

// AuditOpts selects audit entries.
type AuditOpts struct {
	// Process shows only this process's entries. Empty means every process.
	Process string
	// Limit bounds the entries, newest first. Zero means 50.
	Limit int
}

// Audit lists the audit entries, newest first.
func Audit(ctx context.Context, db DB, opts AuditOpts) ([]AuditEntry, error) {
	if opts.Limit <= 0 {
		opts.Limit = 50
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	rows, err := store.ReadAudit(ctx, tx, opts.Process, opts.Limit)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	entries := make([]AuditEntry, len(rows))
	for i, r := range rows {
		e := AuditEntry{ID: r.ID, At: r.At, Process: r.Process, Action: r.Action, Role: r.Role, Actor: r.Actor,
			Reason: r.Reason, RecordID: r.RecordID, PositionBefore: r.Before, PositionAfter: r.After}
		if r.Detail != nil {
			e.Detail = new(AuditDetail)
			if err := json.Unmarshal(r.Detail, e.Detail); err != nil {
				return nil, fmt.Errorf("read audit: entry %d: %w", r.ID, err)
			}
		}
		entries[i] = e
	}
	return entries, nil
}

// repartitionGuard is the margin below the instant of the check that the new partitions start before,
// as processors read below their horizon less theirs.
const repartitionGuard = 5 * time.Millisecond

// Repartition splits process name into n partitions anew (n = 1 included), every one starting after the
// last row of the source, in one transaction, audited. Positions do not carry over between splits, so it
// refuses unless that start skips nothing: an instance running the process (ErrBusy), a stream that never
// ran, is halted or has records behind its position, has keys parked (ErrParked: a key's parked records
// belong to the stream that parked them), or a transaction in flight that could still add rows before the
// start. The error says which, and what to do first.
func Repartition(ctx context.Context, db DB, name string, n int, opts ActionOpts) (AuditEntry, error) {
	if n < 1 {
		return AuditEntry{}, fmt.Errorf("repartition %q: at least 1 partition, got %d", name, n)
	}
	return act(ctx, db, name, "repartition", opts, func(tx pgx.Tx, row cursorRow, _ *AuditEntry) (*inordertype.Position, error) {
		fail := func(format string, args ...any) (*inordertype.Position, error) {
			return nil, fmt.Errorf("repartition %q: "+format, append([]any{name}, args...)...)
		}
		if err := lockForRepartition(ctx, tx, name); err != nil {
			return fail("%w", err)
		}
		proc, err := readProcess(ctx, tx, name)
		if err != nil {
			return fail("%w", err)
		}
		if proc == nil {
			return fail("%w", ErrUnknownProcess)
		}
		// A single stream becomes partitioned, or the partitions are split anew.
		if len(proc.Unregistered) > 0 {
			return fail("%w: only %d of its %d partitions ever ran; run them until they are drained first",
				errNeverRan, len(proc.Streams), proc.Info.Partitions)
		}
		t, err := drained(ctx, tx, proc.Streams)
		if err != nil {
			return fail("%w", err)
		}
		at, err := repartitionStart(ctx, tx, t)
		if err != nil {
			return fail("%w", err)
		}
		if err := store.Resplit(ctx, tx, name, n, at); err != nil {
			return fail("%w", err)
		}
		return &at, nil
	})
}

// lockForRepartition refuses (ErrBusy) while an instance of the process runs: every instance of a
// partitioned process holds its instances lock shared, and a processor working a partition holds its row.
func lockForRepartition(ctx context.Context, tx pgx.Tx, name string) error {
	idle, err := store.NoInstanceRuns(ctx, tx, name)
	if err != nil {
		return err
	}
	if !idle {
		return fmt.Errorf("%w: an instance is running it; stop every instance first", ErrBusy)
	}
	_, err = store.LockPartitions(ctx, tx, name)
	if isLockTimeout(err) {
		return fmt.Errorf("%w: a processor is working a partition; stop every instance first", ErrBusy)
	}
	return err
}

// drained checks that every stream has delivered everything, and returns the whole source table. Their
// positions differ, but once nothing is behind anywhere, the last row of the table is where all of them
// stand.
func drained(ctx context.Context, tx pgx.Tx, streams []Info) (*source.Table, error) {
	for _, s := range streams {
		switch {
		case s.Locked:
			return nil, fmt.Errorf("%w: %s is running (owned by %s); stop every instance first", ErrBusy, s.Process, s.Holder)
		case s.Halt != nil:
			what := "halted on"
			if s.Halt.Retrying() {
				what = "retrying"
			}
			return nil, fmt.Errorf("%w: %s is %s record %s; resolve that first", errNotDrained, s.Process, what, s.Halt.RecordID)
		case s.Source.Table == "":
			return nil, fmt.Errorf("%w: %s has never run; run it until it is drained first", errNeverRan, s.Process)
		case s.ParkedKeys > 0:
			return nil, fmt.Errorf("%w: %s has %d keys parked (%d records); redrive or skip them first (inorder parked)",
				ErrParked, s.Process, s.ParkedKeys, s.ParkedRecords)
		}
		t, err := source.Inspect(ctx, tx, s.Source)
		if err != nil {
			return nil, err
		}
		lag, err := source.AdminOf(t).Behind(ctx, tx, s.Position)
		if err != nil {
			return nil, err
		}
		if lag.Rows > 0 {
			return nil, fmt.Errorf("%w: %s is %d rows behind; let it drain, then stop it, then repartition",
				errNotDrained, s.Process, lag.Rows)
		}
	}
	whole := streams[0].Source
	whole.Partition = nil
	return source.Inspect(ctx, tx, whole)
}

// repartitionStart is where the new partitions start: after the last row dated before the instant at
// which nothing was in flight, less the guard the processors use. It refuses (errInFlight) while a
// transaction that could still add rows before it is open.
func repartitionStart(ctx context.Context, tx pgx.Tx, t *source.Table) (inordertype.Position, error) {
	// The backends' status was read for the list above: read it anew for the transactions in flight.
	if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return inordertype.Position{}, err
	}
	o, err := t.PollLocks(ctx, tx)
	if err != nil {
		return inordertype.Position{}, err
	}
	if pids := o.InFlight(t); len(pids) > 0 {
		return inordertype.Position{}, fmt.Errorf("%w on %s (backends %v), and their rows would be behind the new partitions' start; "+
			"try again when they are done", errInFlight, t.Qualified, pids)
	}
	// Nothing was in flight when the locks were read: every row dated before then is visible now. Rows
	// dated after it may still come from transactions begun since: the new partitions start before them,
	// so they are delivered, perhaps again, never skipped.
	return source.AdminOf(t).TailBefore(ctx, tx, o.Now.Add(-repartitionGuard))
}
