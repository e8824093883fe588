package processor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// The application migrates its outbox while the stream runs. Every batch's poll of the transactions in
// flight reads the fingerprint of the source's columns too (see source.Table.Shape); when it differs from
// the one the read was built for, or a read was refused for columns the table no longer has, the columns
// are inspected again before the next read:
//   - a column added is read from then on, when the process reads all columns (no Source.Columns, and a
//     generic record such as handlers.Row; a struct's columns are its fields);
//   - a column dropped or renamed that the process does not need leaves the records, and the stream goes on;
//   - a change of type is read as the column now is;
//   - a column the process needs (the order column, the id, the key, a selected column, a column the
//     handler reads) dropped or renamed, or a table that no longer passes the checks of start-up: the
//     stream waits, without halting or skipping anything, says what it waits for (the log, status, the
//     Observer.SourceWaiting), and reads on by itself once the table fits again.

// shapeWatch is what the processor knows of its source's columns across batches.
type shapeWatch struct {
	known string // the fingerprint the read was built for, as the start-up's inspection read it
	stale bool   // a read was refused for its columns: inspect them again, whatever the fingerprint
	// clear says the cursor row may still say a wait a run before this one left: the first batch clears it.
	clear bool
	// unsure says a batch was rolled back after a read refused for its columns: the cursor row may still
	// say a wait that is over.
	unsure bool
	cols   []source.Column // every column of the table at the last inspection that fitted, to name a renamed one
	wait   *source.Wait    // what the stream waits for; nil while it reads
	said   time.Time       // when the wait was last logged
}

// knowShape takes in what the start-up's inspection found of t's columns: their fingerprint, which the
// first poll then finds the same unless a migration came in between, so that the columns are not
// inspected again at once (six catalog statements a process, a thousand processes starting together).
func (rd *reader[T]) knowShape(t *source.Table) {
	rd.shape.known, rd.shape.cols, rd.shape.clear = t.InspectedShape, t.All, true
}

// followShape inspects the source again when the last poll found its columns changed (shape), a read was
// refused for them, or the stream waits for them, and reports whether the stream must wait. kind is the
// horizon in use, which decides what the table must still have (see needs).
func (rd *reader[T]) followShape(work context.Context, shape string, kind inordertype.Horizon) (bool, error) {
	sw := &rd.shape
	if shape == sw.known && !sw.stale && sw.wait == nil {
		if sw.clear {
			sw.clear = false
			return false, rd.cur.Source.SetSourceWait(work, "")
		}
		return false, nil
	}
	ctx, cancel := rd.cur.Session.Bounded(work)
	defer cancel()
	t, all, w, err := source.Reinspect(ctx, rd.cur.Lock.Tx(), rd.reinspectSpec(kind), rd.needs(kind), sw.cols)
	if err != nil {
		return false, err
	}
	if w == nil {
		if err := rd.checkColumns(t); err != nil {
			w = &source.Wait{Message: err.Error() + "; the stream waits for the table to fit again, skipping nothing"}
		}
	}
	if w != nil {
		return true, rd.waitForShape(work, w)
	}
	return false, rd.adopt(work, t, all, shape)
}

// reinspectSpec is the source to inspect again: as the processor resolved it at start (the key column
// found then stays the key), with a trace column it found by itself left to be found again, and the
// horizon that never refuses a default (the horizon in use stays; see adopt), or the insert clock, which
// the table must still have and which orders it.
func (rd *reader[T]) reinspectSpec(kind inordertype.Horizon) inordertype.Source {
	spec := rd.table.Spec
	spec.Horizon = inordertype.HorizonTransactions
	if kind == inordertype.HorizonClock {
		spec.Horizon = inordertype.HorizonClock
	}
	if rd.src.TraceColumn == "" {
		spec.TraceColumn, spec.TraceStateColumn = "", rd.src.TraceStateColumn
	}
	return spec
}

// needs lists the columns the process cannot read its records without.
func (rd *reader[T]) needs(kind inordertype.Horizon) []source.Need {
	s := rd.table.Spec
	needs := []source.Need{{Column: s.CreatedAtColumn, Role: "the order column"}, {Column: s.IDColumn, Role: "the id column"}}
	if kind == inordertype.HorizonClock {
		needs = append(needs, source.Need{Column: source.ClockColumn, Role: "the insert clock, which orders the table"})
	}
	if s.KeyColumn != "" {
		needs = append(needs, source.Need{Column: s.KeyColumn, Role: "the key column"})
	}
	if c := rd.src.TraceColumn; c != "" {
		needs = append(needs, source.Need{Column: c, Role: "the trace column"})
	}
	if c := rd.src.TraceStateColumn; c != "" {
		needs = append(needs, source.Need{Column: c, Role: "the trace state column"})
	}
	role := "a column the process selects (Source.Columns, --columns)"
	if len(rd.src.Columns) == 0 && rd.structCols != nil {
		var zero T
		role = fmt.Sprintf("the column of a field of %T", zero)
	}
	for _, c := range s.Columns {
		needs = append(needs, source.Need{Column: c, Role: role})
	}
	if rd.columns != nil {
		for _, c := range rd.columns.ReadsColumns() {
			needs = append(needs, source.Need{Column: c, Role: "a column the handler reads (a payload, type or header column)"})
		}
	}
	return needs
}

// waitForShape makes the stream wait for w: said in the log (again when it changes, and every
// HoldWarnAfter), to the observer, and in the cursor row for status.
func (rd *reader[T]) waitForShape(work context.Context, w *source.Wait) error {
	sw := &rd.shape
	changed := sw.wait == nil || *sw.wait != *w
	if changed || time.Since(sw.said) >= rd.holdWarnAfter {
		rd.log.Warn().Str("table", rd.table.Qualified).Str("column", w.Column).Msg(w.Message)
		sw.said = time.Now()
	}
	if changed {
		rd.obs.SourceWaiting(rd.process, w.Column, true)
	}
	sw.wait = w
	return rd.cur.Source.SetSourceWait(work, w.Message)
}

// adopt makes t, inspected at shape, the table the stream reads from the next read on. The horizon in use
// and the created_at default it was chosen for stay those of start-up: a changed default is followed by the
// horizon's own watch, which never lets a change skip a row (see horizon).
func (rd *reader[T]) adopt(work context.Context, t *source.Table, all []source.Column, shape string) error {
	sw, old := &rd.shape, rd.table
	first := sw.known == "" || sw.clear
	rd.takeAhead(inordertype.Position{}) // a batch read ahead for the old columns is read again
	t.Spec.Horizon, t.Horizon, t.Default, t.Warnings = old.Spec.Horizon, old.Horizon, old.Default, nil
	rd.table = t
	rd.prepareScan(t)
	sw.known, sw.stale, sw.clear, sw.cols = shape, false, false, all
	if sw.wait != nil {
		rd.log.Info().Str("table", t.Qualified).Msg("the source fits the process again; the stream reads on")
		rd.obs.SourceWaiting(rd.process, "", false)
		sw.wait = nil
		return rd.cur.Source.SetSourceWait(work, "")
	}
	if first || sw.unsure {
		sw.unsure = false
		return rd.cur.Source.SetSourceWait(work, "") // what a run before this one, or a batch rolled back, left
	}
	if !slices.Equal(old.Columns, t.Columns) {
		rd.log.Info().Str("table", t.Qualified).Str("columns", columnList(t.Columns)).
			Msg("the columns of the source changed; records are read with its columns as they are now")
	}
	return nil
}

// readRefused takes in a read's error: when the server refused the read for columns the table no longer
// has (a migration committed between the poll and the read), the columns are inspected again before the
// next read, and it reports true: the caller rolls the batch back, and the stream goes on. Anything else
// is the caller's.
func (rd *reader[T]) readRefused(err error) bool {
	if !source.ShapeChanged(err) {
		return false
	}
	rd.shape.stale, rd.shape.unsure = true, true
	rd.log.Info().Err(err).Str("table", rd.table.Qualified).Msg("the source changed under the read; inspecting its columns again")
	return true
}

// shapeRefusal is a read of the source that the server refused for columns the table no longer has,
// hidden from isFatal: the batch is rolled back, and retried once the columns were inspected again.
type shapeRefusal struct{ err error }

func (e shapeRefusal) Error() string { return e.err.Error() }

// refusedRead marks the columns to be inspected again when err is the server's refusal of a read for
// them, and returns it as a shapeRefusal then; any other error as it is.
func (rd *reader[T]) refusedRead(err error) error {
	if !source.ShapeChanged(err) {
		return err
	}
	rd.shape.stale, rd.shape.unsure = true, true
	return shapeRefusal{err}
}

// followShape is the reader's followShape under the horizon in use: a table inspected anew under another
// relation, or another order column, has its poll of the transactions in flight ride with the locks.
func (p *Processor[T]) followShape(work context.Context, shape string) (bool, error) {
	old := p.rd.table
	wait, err := p.rd.followShape(work, shape, p.hz.kind)
	if t := p.rd.table; t != old && (t.OID != old.OID || t.CreatedAtNum != old.CreatedAtNum) {
		p.hz.rideLocks(t)
	}
	return wait, err
}

// columnList is the names of cs, for the log.
func columnList(cs []source.Column) string {
	s := ""
	for i, c := range cs {
		if i > 0 {
			s += ", "
		}
		s += c.Name
	}
	return s
}
