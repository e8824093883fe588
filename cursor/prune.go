package cursor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/setting"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// The refusals of Prune, which say what to fix.
var (
	// errNoReaders: Prune was asked for a table that no process reads, so nothing says which of its rows
	// were delivered.
	errNoReaders = errors.New("no process reads the table")
	// errHalted: Prune was asked for a cut-off at or after the record a process of the table is halted on.
	// The record's fate (fixed, or skipped by an operator) is undecided, so the prune waits for it. A
	// process only retrying a record does not refuse a prune; its position holds it back.
	errHalted = errors.New("a process of the table is halted before the cut-off")
)

// holdOffPrune waits for a prune batch in progress and keeps the next from starting until the caller's
// transaction ends (see store.PruneLockKey).
func holdOffPrune(ctx context.Context, tx pgx.Tx) error {
	err := store.HoldOffPrune(ctx, tx)
	if isLockTimeout(err) {
		return fmt.Errorf("%w: a prune of the table held it up; try again", ErrBusy)
	}
	return err
}

// PruneOpts says what Prune deletes, and who asks. Set exactly one of OlderThan and Before.
type PruneOpts struct {
	// ActionOpts names who prunes and why, for the audit; Actor is required unless DryRun. Wait bounds how
	// long a batch waits for a lock (a rewind or a registering process holding off the batch, a
	// transaction holding one of the rows): zero means 10s.
	ActionOpts
	// Table is the source table, as processors are given it (schema-qualified or on the search_path).
	// Required.
	Table string
	// OlderThan deletes rows created more than this long before the database's clock (its now() when
	// the prune starts, never the caller's clock).
	OlderThan time.Duration
	// Before deletes rows created before this time.
	Before time.Time
	// DryRun counts what would be deleted, and where the processes stand, deleting nothing and writing
	// no audit entry.
	DryRun bool
	// BatchSize bounds the rows each batch deletes, each batch in a short transaction of its own. Zero
	// means 1000.
	BatchSize int
}

// PruneReader is one process that reads the pruned table, as the last batch saw it.
type PruneReader struct {
	// Process is the process's name (the partitioned process's, not a partition's).
	Process string
	// Stream is the cursor row holding Position: Process itself, or its partition furthest back
	// ("<process>#<i>/<n>").
	Stream string
	// Position is the durable position the process has passed: for a partitioned process, that of its
	// partition furthest back.
	Position inordertype.Position
	// Note says why the process stands where it stands when it is not simply delivering: "paused",
	// "never ran", "halted on record 7", "retrying record 7". Empty otherwise.
	Note string
}

// PruneResult is what Prune did, or, for a dry run, would do.
type PruneResult struct {
	// Table is the pruned table, schema-qualified.
	Table string
	// Cut is the cut-off: rows created before it may go (PruneOpts.Before, or the database's clock less
	// PruneOpts.OlderThan).
	Cut time.Time
	// Rows counts the rows deleted (a dry run: the rows that would be).
	Rows int64
	// Through is the last row deleted (would be), in (created_at, id) order; the beginning when none.
	Through inordertype.Position
	// Passed is the position every process of the table has passed: its lowest. Every row at or before
	// it was delivered by every process; a table partitioned by time may drop each partition whose upper
	// bound is at or before Passed.CreatedAt.
	Passed inordertype.Position
	// Limit is the process holding Passed when it lies before Cut, so that it limits the prune; nil when
	// every process has passed the cut-off, or when several stand at Passed together.
	Limit *PruneReader
	// Readers are every process of the table, and every process that never ran (which might read it).
	Readers []PruneReader
	// Batches counts the batches committed.
	Batches int
	// DryRun is set when nothing was deleted because PruneOpts.DryRun asked so.
	DryRun bool
	// Entries are the audit entries written, one per process of the table, with the final counts; none
	// when nothing was deleted.
	Entries []AuditEntry
}

// Prune deletes the rows of a source table that every process reading it has durably passed: rows
// created before the cut-off and at or before the committed position of every process of the table (every
// partition of a partitioned process). A process that is behind, paused or halted limits it to its
// position; one that never ran limits it to the beginning, since nothing says which table it will read
// (run it, or Forget it). Prune refuses a table no process reads, and a cut-off at or after the record a
// process of the table is halted on, in an error that names the table or the process.
//
// It deletes in batches of at most BatchSize rows, oldest first, each in a short transaction of its own
// that reads the positions anew under a lock that rewinds and newly registering processes wait for: a
// rewind between batches bounds the next batch, and a process that appears meanwhile starts at the oldest
// row left. Deleted rows are gone: a rewind to before them delivers from the oldest row left. Writers and
// running processors go on beside it; a batch holds locks only on its own rows, and processors of the
// table see it as a writer for the few milliseconds it takes. The rows leave dead tuples that (auto)vacuum
// reclaims for reuse; the table's files do not shrink.
//
// Each process of the table gets one audit entry, written with the first batch that deletes and updated
// with every later one, so it says what was deleted even when the prune is interrupted. Prune returns what
// was done with any error. Give it a pool or a connection: inside a pgx.Tx every batch would run in the
// caller's transaction.
func Prune(ctx context.Context, db DB, opts PruneOpts) (PruneResult, error) {
	res := PruneResult{Table: opts.Table, DryRun: opts.DryRun}
	fail := func(format string, args ...any) (PruneResult, error) {
		return res, fmt.Errorf("prune %s: "+format, append([]any{res.Table}, args...)...)
	}
	switch {
	case strings.TrimSpace(opts.Table) == "":
		return res, errors.New("prune: a table is required")
	case (opts.OlderThan > 0) == !opts.Before.IsZero():
		return fail("give exactly one of a positive age (OlderThan) and a time (Before)")
	case opts.OlderThan < 0:
		return fail("the age %s is negative", opts.OlderThan)
	case opts.BatchSize < 0:
		return fail("the batch size %d is negative", opts.BatchSize)
	case opts.Actor == "" && !opts.DryRun:
		return fail("an actor is required")
	}
	batch := opts.BatchSize
	if batch == 0 {
		batch = setting.DefaultPruneBatch
	}
	var from inordertype.Position
	for {
		if err := ctx.Err(); err != nil {
			return fail("stopped after %d batches: %w", res.Batches, err)
		}
		n, err := pruneBatch(ctx, db, opts, &res, from, batch)
		if err != nil {
			if isLockTimeout(err) {
				return fail("%w: a lock stayed held for over %s (a rewind, a registering process, or a transaction "+
					"on the oldest rows); try again", ErrBusy, opts.wait())
			}
			return res, err
		}
		if opts.DryRun || n < int64(batch) {
			return res, nil
		}
		from = res.Through
	}
}

// pruneBatch runs one batch in a transaction of its own: it takes the prune lock, reads where every
// process stands, deletes up to batch rows after from (or, for a dry run, counts them all) and updates
// the audit, filling res in.
func pruneBatch(ctx context.Context, db DB, opts PruneOpts, res *PruneResult, from inordertype.Position, batch int) (int64, error) {
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("prune %s: %w", res.Table, err) }
	tx, err := beginWaiting(ctx, db, opts.wait())
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if res.Cut.IsZero() {
		// The cut-off is fixed once, by the database's clock, so that a long prune does not drift.
		cut := opts.Before
		if opts.OlderThan > 0 {
			if err := tx.QueryRow(ctx, "SELECT now() - $1::interval", opts.OlderThan).Scan(&cut); err != nil {
				return fail(err)
			}
		}
		res.Cut = cut.UTC()
	}
	if !opts.DryRun {
		// Rewinds and processes registering wait for this batch, and it for them (see
		// store.PruneLockKey). The positions are read after, in a statement that sees every one of
		// them that committed.
		if err := store.LockForPrune(ctx, tx); err != nil {
			return fail(err)
		}
	}
	p, err := planPrune(ctx, tx, opts.Table, res.Cut)
	if err != nil {
		return fail(err)
	}
	res.Table, res.Readers, res.Passed, res.Limit = p.table.Qualified, p.readers, p.passed(), p.limit
	sel := source.Prunable{Cut: res.Cut, Passed: p.positions, Lowest: p.lowest, From: from}
	if opts.DryRun {
		n, last, err := source.AdminOf(p.table).CountPrunable(ctx, tx, sel)
		if err != nil {
			return fail(err)
		}
		res.Rows, res.Through = n, last
		return n, nil
	}
	n, last := int64(0), inordertype.Position{}
	if !p.passed().IsBeginning() {
		if n, last, err = source.AdminOf(p.table).DeletePrunable(ctx, tx, sel, batch); err != nil {
			return fail(err)
		}
	}
	if n == 0 {
		return 0, nil // nothing changed: the transaction rolls back
	}
	total, through := res.Rows+n, last
	detail := AuditDetail{Table: p.table.Qualified, Rows: total, Through: &through, Before: &res.Cut}
	if err := auditPrune(ctx, tx, opts, res, p.readers, detail); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	res.Rows, res.Through = total, through
	for i := range res.Entries {
		d := detail
		res.Entries[i].Detail = &d
	}
	res.Batches++
	return n, nil
}

// auditPrune writes one audit entry per reader for the first batch that deleted rows, and brings them up
// to date (detail: the rows deleted so far, through where) in every batch after it.
func auditPrune(ctx context.Context, tx pgx.Tx, opts PruneOpts, res *PruneResult, readers []PruneReader, detail AuditDetail) error {
	if len(res.Entries) == 0 {
		entries := make([]AuditEntry, 0, len(readers))
		// Every reader is a process of the table: one that never ran would have kept the prune at the
		// beginning, so nothing would have been deleted.
		for _, r := range readers {
			pos := r.Position
			d := detail
			e := AuditEntry{Process: r.Process, Action: "prune", Actor: opts.Actor, Reason: opts.Reason,
				PositionBefore: &pos, Detail: &d}
			if err := insertAudit(ctx, tx, &e); err != nil {
				return err
			}
			entries = append(entries, e)
		}
		res.Entries = entries
		return nil
	}
	ids := make([]int64, len(res.Entries))
	for i, e := range res.Entries {
		ids[i] = e.ID
	}
	if err := store.SetAuditDetail(ctx, tx, ids, detail); err != nil {
		return fmt.Errorf("update audit: %w", err)
	}
	return nil
}

// noteUnknown marks a process that never ran: the table it reads is unknown, so it might read this one.
const noteUnknown = "never ran, so the table it reads is unknown"

// prunePlan is where the processes of a table stand, as one batch reads it.
type prunePlan struct {
	table     *source.Table
	readers   []PruneReader
	positions []inordertype.Position // every stream's position that bounds the prune
	lowest    int                    // the index of the lowest of positions: what every process passed
	limit     *PruneReader
}

// passed is the position every process of the table has passed.
func (p *prunePlan) passed() inordertype.Position { return p.positions[p.lowest] }

// pruneBound is one stream of a process of the table, which bounds the prune at its position.
type pruneBound struct {
	reader int // index in prunePlan.readers
	stream string
	pos    inordertype.Position
	row    *Info // nil for a partition that never ran, or a process that never ran
	paused bool  // the stream or its process is paused
	note   string
}

// planPrune reads every process, finds those of table (and those that never ran), checks their halts
// against cut and finds the lowest position.
func planPrune(ctx context.Context, tx pgx.Tx, table string, cut time.Time) (*prunePlan, error) {
	qualified, err := source.Resolve(ctx, tx, table)
	if err != nil {
		return nil, err
	}
	procs, err := pruneProcesses(ctx, tx)
	if err != nil {
		return nil, err
	}
	p := &prunePlan{}
	bounds, spec, err := p.boundsOf(procs, qualified)
	if err != nil {
		return nil, err
	}
	whole := spec
	whole.Table, whole.Partition, whole.KeyColumn = qualified, nil, ""
	if p.table, err = source.Inspect(ctx, tx, whole); err != nil {
		return nil, err
	}
	if err := p.checkHalts(ctx, tx, bounds, cut); err != nil {
		return nil, err
	}
	if bounds, err = p.keepParked(ctx, tx, bounds); err != nil {
		return nil, err
	}
	return p, p.rank(ctx, tx, bounds, cut)
}

// pruneProcesses reads what a prune needs of every process, in one statement under the prune lock: its
// streams' sources, their positions as they stand, their halts and pauses, and the heads of their parked
// records. It is not the status listing: who holds a process and whether rows are behind it do not bound
// a prune.
func pruneProcesses(ctx context.Context, tx pgx.Tx) ([]Process, error) {
	rows, err := store.ListCursors(ctx, tx, "", false)
	if err != nil {
		return nil, fmt.Errorf("read the positions: %w", err)
	}
	infos := make([]Info, len(rows))
	for i, c := range rows {
		infos[i] = infoOf(c)
	}
	return group(infos), nil
}

// boundsOf finds the processes that read qualified, and those that never ran (the table they read is
// unknown, so they might read this one), as readers, and every stream of theirs as a bound. It returns
// how the table is ordered, which every reader must agree on.
func (p *prunePlan) boundsOf(procs []Process, qualified string) ([]pruneBound, inordertype.Source, error) {
	var bounds []pruneBound
	var spec *inordertype.Source
	for _, proc := range procs {
		reads, ran := false, false
		for _, s := range proc.Streams {
			if s.Source.Table == "" {
				continue
			}
			ran = true
			if s.Source.Table != qualified {
				continue
			}
			reads = true
			src := s.Source
			if spec == nil {
				spec = &src
			} else if src.IDColumn != spec.IDColumn || src.CreatedAtColumn != spec.CreatedAtColumn {
				return nil, inordertype.Source{}, fmt.Errorf("processes read %s ordered by different columns (%s by %s, %s; another by %s, %s), "+
					"so no one position says what all of them passed", qualified, s.Process, src.CreatedAtColumn,
					src.IDColumn, spec.CreatedAtColumn, spec.IDColumn)
			}
		}
		switch {
		case reads:
			for i := range proc.Streams {
				s := &proc.Streams[i]
				bounds = append(bounds, pruneBound{reader: len(p.readers), stream: s.Process, pos: s.Position, row: s,
					paused: s.Paused || proc.Info.Paused})
			}
			for _, name := range proc.Unregistered {
				bounds = append(bounds, pruneBound{reader: len(p.readers), stream: name})
			}
			p.readers = append(p.readers, PruneReader{Process: proc.Name})
		case !ran:
			bounds = append(bounds, pruneBound{reader: len(p.readers), stream: proc.Name})
			p.readers = append(p.readers, PruneReader{Process: proc.Name, Stream: proc.Name, Note: noteUnknown})
		}
	}
	if spec == nil {
		never := ""
		if len(p.readers) > 0 { // only processes that never ran
			names := make([]string, len(p.readers))
			for i, r := range p.readers {
				names[i] = r.Process
			}
			never = fmt.Sprintf(" (never ran, so their tables are unknown: %s)", strings.Join(names, ", "))
		}
		return nil, inordertype.Source{}, fmt.Errorf("%w: no process has %s as its source%s, so nothing says which of its rows were delivered",
			errNoReaders, qualified, never)
	}
	return bounds, *spec, nil
}

// keepParked adds, for every stream with parked records, a bound just before the first of them, so that
// their rows stay for the redrive: the stream's position has passed them, but they were not delivered.
func (p *prunePlan) keepParked(ctx context.Context, tx pgx.Tx, bounds []pruneBound) ([]pruneBound, error) {
	for _, b := range bounds {
		if b.row == nil || b.row.OldestParked == nil {
			continue
		}
		before, err := p.table.Before(ctx, tx, *b.row.OldestParked)
		if err != nil {
			return nil, err
		}
		bounds = append(bounds, pruneBound{reader: b.reader, stream: b.stream, pos: before,
			note: fmt.Sprintf("parked record %s (%d keys parked; redrive or skip them)", b.row.OldestParked.ID, b.row.ParkedKeys)})
	}
	return bounds, nil
}

// checkHalts refuses a cut-off that reaches the record a stream is halted on: it waits for an operator to
// fix or skip it. A stream only retrying a record is held back by its position like any other.
func (p *prunePlan) checkHalts(ctx context.Context, tx pgx.Tx, bounds []pruneBound, cut time.Time) error {
	for _, b := range bounds {
		if b.row == nil || b.row.Halt == nil || b.row.Halt.Retrying() {
			continue
		}
		h := b.row.Halt
		rec, err := source.AdminOf(p.table).Find(ctx, tx, h.RecordID)
		if errors.Is(err, source.ErrNoRecord) {
			rec = b.pos // gone from the table: it was after the position, so judge by that
		} else if err != nil {
			return err
		}
		if !rec.CreatedAt.After(cut) {
			return fmt.Errorf("%w: %s is halted on record %s, created %s, at or before the cut-off %s; "+
				"resolve the halt first (inorder status --process %s), or prune to an earlier time", errHalted, b.stream,
				h.RecordID, rec.CreatedAt.UTC().Format(time.RFC3339Nano), cut.UTC().Format(time.RFC3339Nano),
				p.readers[b.reader].Process)
		}
	}
	return nil
}

// rank orders every stream's position in one query: each reader stands where its stream furthest back
// does, the lowest of all is what every process passed, and the reader that alone stands there is the
// limit.
func (p *prunePlan) rank(ctx context.Context, tx pgx.Tx, bounds []pruneBound, cut time.Time) error {
	for _, b := range bounds {
		p.positions = append(p.positions, b.pos)
	}
	ranked, err := source.AdminOf(p.table).Order(ctx, tx, p.positions)
	if err != nil {
		return err
	}
	p.lowest = ranked[0]
	placed := make([]bool, len(p.readers))
	for _, bi := range ranked {
		b := bounds[bi]
		if placed[b.reader] {
			continue
		}
		placed[b.reader] = true
		r := &p.readers[b.reader]
		r.Stream, r.Position = b.stream, b.pos
		switch {
		case r.Note != "":
		case b.note != "":
			r.Note = b.note
		case b.row == nil:
			r.Note = "never ran"
		case b.row.Halt != nil && b.row.Halt.Retrying():
			r.Note = "retrying record " + b.row.Halt.RecordID
		case b.row.Halt != nil:
			r.Note = "halted on record " + b.row.Halt.RecordID
		case b.paused:
			r.Note = "paused"
		}
	}
	// One process holds the prune back when it alone stands furthest back; when every stream furthest back
	// belongs to processes at the very same place, none of them is more to blame than another.
	tied := false
	for _, bi := range ranked[1:] {
		if p.positions[bi] == p.passed() && bounds[bi].reader != bounds[p.lowest].reader {
			tied = true
		}
	}
	if passed := p.passed(); !tied && (passed.IsBeginning() || passed.CreatedAt.Before(cut)) {
		limit := p.readers[bounds[p.lowest].reader]
		p.limit = &limit
	}
	return nil
}
