package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/processor"
)

// opFlags are the flags every operator action shares.
type opFlags struct {
	databaseURL string
	process     string
	actor       string
	reason      string
	wait        time.Duration
}

func (o *opFlags) register(fs *flag.FlagSet, reasonRequired bool) {
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "database (default $DATABASE_URL)")
	fs.StringVar(&o.process, "process", "", "process to act on (required)")
	fs.StringVar(&o.actor, "actor", os.Getenv("USER"), "who acts, recorded in the audit with the database role (default $USER)")
	help := "why, recorded in the audit"
	if reasonRequired {
		help += " (required)"
	}
	fs.StringVar(&o.reason, "reason", "", help)
	fs.DurationVar(&o.wait, "wait", 10*time.Second, "how long to wait for a running batch to release the cursor")
}

func (o *opFlags) check(reasonRequired bool) error {
	if o.process == "" {
		return usageErr("--process is required")
	}
	if o.actor == "" {
		return usageErr("--actor is required (or set USER)")
	}
	if reasonRequired && o.reason == "" {
		return usageErr("--reason is required: say why, for the audit")
	}
	return nil
}

func (o *opFlags) opts() cursor.ActionOpts {
	return cursor.ActionOpts{Actor: o.actor, Reason: o.reason, Wait: o.wait}
}

func (o *opFlags) connect(ctx context.Context) (*pgx.Conn, error) { return connect(ctx, o.databaseURL) }

// source returns the process's cursor state and the source it last ran against.
func source(ctx context.Context, conn *pgx.Conn, name string) (cursor.Info, processor.Source, error) {
	infos, err := cursor.List(ctx, conn, name)
	if err != nil {
		return cursor.Info{}, processor.Source{}, err
	}
	if len(infos) == 0 {
		return cursor.Info{}, processor.Source{}, fmt.Errorf("no process named %q", name)
	}
	in := infos[0]
	if in.Source.Table == "" {
		return in, processor.Source{}, fmt.Errorf("process %q has never run, so its source is unknown", name)
	}
	return in, processor.RecordedSource(in.Source), nil
}

func printEntry(w io.Writer, e cursor.AuditEntry) {
	fmt.Fprintf(w, "inorder: %s on %s by %s (role %s) at %s: audit entry %d\n", e.Action, e.Process, e.Actor, e.Role,
		e.At.UTC().Format(time.RFC3339), e.ID)
}

func skipCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("skip", stderr)
	var o opFlags
	o.register(fs, true)
	record := fs.String("record", "", "id of the record the stream is halted on (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.check(true); err != nil {
		return err
	}
	if *record == "" {
		return usageErr("--record is required: the id of the halted record")
	}
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	in, src, err := source(ctx, conn, o.process)
	if err != nil {
		return err
	}
	if in.Halt == nil {
		return fmt.Errorf("skip record %s on %q: %w; skip only moves past a halted record", *record, o.process, cursor.ErrNotHalted)
	}
	loc, err := processor.Locate(ctx, conn, src, *record, in.Position)
	if err != nil {
		return err
	}
	e, err := cursor.Skip(ctx, conn, o.process, loc.Record, o.opts())
	if err != nil {
		return err
	}
	printEntry(stdout, e)
	return nil
}

func rewindCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rewind", stderr)
	var o opFlags
	o.register(fs, false)
	toRecord := fs.String("to-record", "", "deliver again from this record (inclusive)")
	toTime := fs.String("to-time", "", "deliver again from the first record created at or after this RFC 3339 time")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.check(false); err != nil {
		return err
	}
	if (*toRecord == "") == (*toTime == "") {
		return usageErr("give exactly one of --to-record and --to-time")
	}
	var at time.Time
	if *toTime != "" {
		var err error
		if at, err = time.Parse(time.RFC3339Nano, *toTime); err != nil {
			return usageErr("--to-time %q is not an RFC 3339 time (e.g. 2024-05-06T07:08:09Z)", *toTime)
		}
	}
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	in, src, err := source(ctx, conn, o.process)
	if err != nil {
		return err
	}
	var to cursor.Position
	if *toRecord != "" {
		loc, err := processor.Locate(ctx, conn, src, *toRecord, in.Position)
		if err != nil {
			return err
		}
		if loc.Ahead {
			return fmt.Errorf("rewind %q to record %s: it is ahead of the position, and moving there would skip "+
				"the records in between; rewind only moves back", o.process, *toRecord)
		}
		to = loc.Before
	} else {
		// The position just before the time: every record created at or after it is delivered again.
		to = cursor.Position{CreatedAt: at.UTC().Add(-time.Microsecond)}
		if in.Position.IsBeginning() || !to.CreatedAt.Before(in.Position.CreatedAt) {
			return fmt.Errorf("rewind %q to %s: that is not before the position (%s); rewind only moves back",
				o.process, *toTime, in.Position)
		}
	}
	e, err := cursor.Rewind(ctx, conn, o.process, to, *toRecord, o.opts())
	if err != nil {
		return err
	}
	printEntry(stdout, e)
	return nil
}

func pauseCmd(pause bool) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		name := "resume"
		if pause {
			name = "pause"
		}
		fs := newFlagSet(name, stderr)
		var o opFlags
		o.register(fs, false)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if err := o.check(false); err != nil {
			return err
		}
		conn, err := o.connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		act := cursor.Resume
		if pause {
			act = cursor.Pause
		}
		e, err := act(ctx, conn, o.process, o.opts())
		if errors.Is(err, cursor.ErrUnknownProcess) {
			return fmt.Errorf("no process named %q", o.process)
		}
		if err != nil {
			return err
		}
		printEntry(stdout, e)
		return nil
	}
}

func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", stderr)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "database (default $DATABASE_URL)")
	process := fs.String("process", "", "show only this process")
	limit := fs.Int("limit", 50, "newest entries to show")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	conn, err := connect(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	entries, err := cursor.Audit(ctx, conn, *process, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"entries": entries})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tPROCESS\tACTION\tBY\tRECORD\tREASON")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05"), clip(e.Process, 20),
			e.Action, clip(e.Actor, 12), clip(e.Role, 12), clip(e.RecordID, 12), clip(e.Reason, 30))
	}
	return tw.Flush()
}

func repartitionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("repartition", stderr)
	var o opFlags
	o.register(fs, false)
	n := fs.Int("partitions", 0, "the new number of partitions (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.check(false); err != nil {
		return err
	}
	if *n < 1 {
		return usageErr("--partitions must be at least 1")
	}
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	infos, err := cursor.List(ctx, conn, "")
	if err != nil {
		return err
	}
	var parent *cursor.Info
	var streams []cursor.Info
	for i := range infos {
		switch {
		case infos[i].Process == o.process:
			parent = &infos[i]
		case strings.HasPrefix(infos[i].Process, o.process+"#"):
			streams = append(streams, infos[i])
		}
	}
	if parent == nil {
		return fmt.Errorf("no process named %q", o.process)
	}
	if parent.Partitions == 0 {
		streams = []cursor.Info{*parent} // a single stream becomes partitioned
	} else if len(streams) < parent.Partitions {
		return fmt.Errorf("repartition %q: only %d of its %d partitions ever ran; run them until they are drained first",
			o.process, len(streams), parent.Partitions)
	}
	// Every old stream must have delivered everything: their positions differ, but once nothing is
	// behind anywhere, the last row of the table is where all of them stand.
	var src processor.Source
	for _, s := range streams {
		switch {
		case s.Locked:
			return fmt.Errorf("repartition %q: %s is running (owned by %s); stop every instance first", o.process, s.Process, s.Holder)
		case s.Halt != nil:
			return fmt.Errorf("repartition %q: %s is halted on record %s; resolve that first", o.process, s.Process, s.Halt.RecordID)
		case s.Source.Table == "":
			return fmt.Errorf("repartition %q: %s has never run; run it until it is drained first", o.process, s.Process)
		}
		src = processor.RecordedSource(s.Source)
		lag, err := processor.Behind(ctx, conn, src, s.Position)
		if err != nil {
			return err
		}
		if lag.Rows > 0 {
			return fmt.Errorf("repartition %q: %s is %d rows behind; let it drain, then stop it, then repartition",
				o.process, s.Process, lag.Rows)
		}
	}
	src.Partition = nil
	if pids, err := processor.Writers(ctx, conn, src); err != nil {
		return err
	} else if len(pids) > 0 {
		return fmt.Errorf("repartition %q: writers are in flight on %s (backends %v), and their rows would be "+
			"behind the new partitions' start; try again when they are done", o.process, src.Table, pids)
	}
	at, err := processor.Tail(ctx, conn, src)
	if err != nil {
		return err
	}
	e, err := cursor.Repartition(ctx, conn, o.process, *n, at, o.opts())
	if err != nil {
		return err
	}
	printEntry(stdout, e)
	fmt.Fprintf(stdout, "inorder: %s now has %d partitions, each starting at %s; create their index before running: "+
		"inorder migrate --partition-index %s:%s:%d\n", o.process, *n, at, src.Table, src.KeyColumn, *n)
	return nil
}
