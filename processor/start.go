package processor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// A process that has no cursor row starts where Config.StartFrom says. Without it, on a table that already
// has rows, Run refuses to register the process rather than deliver the whole table again: the usual way a
// new name appears is a typo beside the real one (or a renamed deployment), and for a payment stream that
// would charge every customer again under new idempotency keys.

// register gives a process that has no cursor row one, at Config.StartFrom, or refuses (a StartFromError).
// An existing process is left as it is.
func (p *Processor[T]) register(ctx context.Context) error {
	if !p.cur.Missing() {
		return nil
	}
	start := p.cfg.StartFrom
	if start.IsZero() {
		conn, err := p.cur.Conn(ctx)
		if err != nil {
			return err
		}
		has, err := p.rd.table.HasRows(ctx, conn)
		if err != nil {
			return err
		}
		if has {
			return fatalError{p.unsetStart(ctx)}
		}
		start = inordertype.StartFromBeginning // nothing to deliver twice
	}
	if err := p.cur.Register(ctx, start); err != nil {
		return err
	}
	if !p.cur.Created() {
		return nil // another instance registered it meanwhile, and said so
	}
	p.log.Info().Str("start", start.String()).Msg("registered a new process")
	return nil
}

// unsetStart is the refusal of a new process without a start, naming the processes that read its table.
func (p *Processor[T]) unsetStart(ctx context.Context) error {
	e := &StartFromError{Table: p.rd.table.Qualified}
	readers := p.readers(ctx)
	if len(readers) == 0 {
		return e
	}
	best := readers[0].name
	for _, r := range readers {
		e.Readers = append(e.Readers, r.String())
		if source.EditDistance(r.name, p.cfg.Process) < source.EditDistance(best, p.cfg.Process) {
			best = r.name
		}
	}
	e.Suggestion = best
	return e
}

// StartFromError is Run's refusal of a new process (one without a cursor row) that has no StartFrom, on a
// table that already has rows: errors.As finds it in Run's error. Its message names the processes that
// read the table, how far they are, and the name among them closest to the process's.
type StartFromError struct {
	// Table is the source table, qualified.
	Table string
	// Readers describes the processes that read the table, each with where it stands; Suggestion is the
	// name among them closest to the process's, empty when none reads it.
	Readers    []string
	Suggestion string
}

func (e *StartFromError) Error() string { return e.Explain("Config.StartFrom") }

// Explain words the refusal with setting as what gives a process its start: Error names Config.StartFrom,
// the CLI its --start-from flag.
func (e *StartFromError) Explain(setting string) string {
	s := fmt.Sprintf("a new process needs a start: the process has no cursor row and %s already has rows, "+
		"which it would all deliver; say where it starts (%s)", e.Table, setting)
	if len(e.Readers) > 0 {
		s += fmt.Sprintf("; processes that read it: %s; did you mean %s?", strings.Join(e.Readers, ", "), e.Suggestion)
	}
	return s
}

// tableReader is a process that reads the table: its name, position and the rows behind it (-1 unknown, a
// partitioned process).
type tableReader struct {
	name       string
	position   inordertype.Position
	behind     int64
	partitions int
}

func (r tableReader) String() string {
	switch {
	case r.partitions > 0:
		return fmt.Sprintf("%s (%d partitions)", r.name, r.partitions)
	case r.behind >= 0:
		return fmt.Sprintf("%s (at %s, %d behind)", r.name, r.position, r.behind)
	}
	return fmt.Sprintf("%s (at %s)", r.name, r.position)
}

// readers lists the processes whose cursor rows say they read the table (a partitioned process once, by
// its name). What cannot be read is left out: the refusal stands without it.
func (p *Processor[T]) readers(ctx context.Context) []tableReader {
	conn, err := p.cur.Conn(ctx)
	if err != nil {
		return nil
	}
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{})
	if err != nil {
		p.log.Debug().Err(err).Msg("could not list the processes that read the table")
		return nil
	}
	var rows []cursor.Info // every cursor row: a process's own, and its partitions'
	for _, pr := range procs {
		rows = append(rows, pr.Info)
		if pr.Partitioned() {
			rows = append(rows, pr.Streams...)
		}
	}
	byName := map[string]*tableReader{}
	for _, in := range rows {
		if in.Source.Table != p.rd.table.Qualified || in.Process == p.cfg.Process {
			continue
		}
		if in.Source.Partition != nil {
			name, _, _ := strings.Cut(in.Process, "#")
			byName[name] = &tableReader{name: name, partitions: in.Source.Partition.Count}
			continue
		}
		r := &tableReader{name: in.Process, position: in.Position, behind: -1}
		if m := in; m.Measure(ctx, conn) == nil {
			r.behind = m.Lag.Rows
		}
		byName[in.Process] = r
	}
	out := make([]tableReader, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
