package processor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// A process that has no cursor row starts where Config.StartFrom says. Without it, on a table that already
// has rows, Run refuses to register the process rather than deliver the whole table again: the usual way a
// new name appears is a typo beside the real one (or a renamed deployment), and for a payment stream that
// would charge every customer again under new idempotency keys.

// registration registers a process reading table at start-up: it gives it a cursor row, at start, unless
// it has one.
type registration struct {
	cur     *store.Repository
	table   *source.Table
	process string
	start   inordertype.StartFrom // Config.StartFrom
	log     zerolog.Logger
}

// register gives a process that has no cursor row one, at Config.StartFrom, or refuses (a StartFromError).
// An existing process is left as it is.
func (rg registration) register(ctx context.Context) error {
	if !rg.cur.Registration.Missing() {
		return nil
	}
	start := rg.start
	if start.IsZero() {
		conn, err := rg.cur.Session.Conn(ctx)
		if err != nil {
			return err
		}
		has, err := rg.table.HasRows(ctx, conn)
		if err != nil {
			return err
		}
		if has {
			return fatalError{rg.unsetStart(ctx)}
		}
		start = inordertype.StartFromBeginning // nothing to deliver twice
	}
	if err := rg.cur.Registration.Register(ctx, start); err != nil {
		return err
	}
	if !rg.cur.Registration.Created() {
		return nil // another instance registered it meanwhile, and said so
	}
	rg.log.Info().Str("start", start.String()).Msg("registered a new process")
	return nil
}

// unsetStart is the refusal of a new process without a start, naming the processes that read its table.
func (rg registration) unsetStart(ctx context.Context) error {
	e := &StartFromError{Table: rg.table.Qualified}
	readers := rg.readers(ctx)
	if len(readers) == 0 {
		return e
	}
	best := readers[0].name
	for _, r := range readers {
		e.Readers = append(e.Readers, r.String())
		if source.EditDistance(r.name, rg.process) < source.EditDistance(best, rg.process) {
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
func (rg registration) readers(ctx context.Context) []tableReader {
	conn, err := rg.cur.Session.Conn(ctx)
	if err != nil {
		return nil
	}
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{})
	if err != nil {
		rg.log.Debug().Err(err).Msg("could not list the processes that read the table")
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
		if in.Source.Table != rg.table.Qualified || in.Process == rg.process {
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
