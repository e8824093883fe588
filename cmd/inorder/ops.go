package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
)

// opFlags are the flags every operator action shares.
type opFlags struct {
	databaseURL databaseURL
	process     string
	actor       flagWithDefault
	reason      string
	wait        time.Duration
}

func (o *opFlags) register(fs *flag.FlagSet, reasonRequired bool) {
	registerDatabaseURL(fs, &o.databaseURL, "database")
	fs.StringVar(&o.process, "process", "", "process to act on (required)")
	registerActor(fs, &o.actor, "whoever acts")
	help := "why, recorded in the audit"
	if reasonRequired {
		help += " (required)"
	}
	fs.StringVar(&o.reason, "reason", "", help)
	fs.DurationVar(&o.wait, "wait", 10*time.Second, "how long to wait for a running batch to release the cursor")
}

// defaultActor is who runs the command: $USER, else the operating system's name for the user.
func defaultActor() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return ""
}

func (o *opFlags) check(reasonRequired bool) error {
	if o.process == "" {
		return usageErr("--process is required")
	}
	if o.actor.get() == "" {
		return usageErr("--actor is required: who acts, for the audit")
	}
	if reasonRequired && o.reason == "" {
		return usageErr("--reason is required: say why, for the audit")
	}
	return nil
}

func (o *opFlags) opts() cursor.ActionOpts {
	return cursor.ActionOpts{Actor: o.actor.get(), Reason: o.reason, Wait: o.wait}
}

func (o *opFlags) connect(ctx context.Context) (*pgx.Conn, error) {
	return connect(ctx, &o.databaseURL)
}

// actionErr says "no process named" for an unknown process, as every command does.
func actionErr(err error, name string) error {
	if errors.Is(err, cursor.ErrUnknownProcess) {
		return fmt.Errorf("no process named %q", name)
	}
	return err
}

func printEntry(w io.Writer, e cursor.AuditEntry) {
	fmt.Fprintf(w, "inorder: %s on %s by %s (role %s) at %s: audit entry %d\n", e.Action, e.Process, e.Actor, e.Role,
		e.At.UTC().Format(time.RFC3339), e.ID)
}

func skipCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("skip", stderr)
	var o opFlags
	o.register(fs, true)
	record := fs.String("record", "", "id of the record the stream is halted on, or of a parked key's first record (required)")
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
	e, err := cursor.Skip(ctx, conn, o.process, *record, o.opts())
	if err != nil {
		return actionErr(err, o.process)
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
	e, err := cursor.Rewind(ctx, conn, o.process, cursor.RewindTarget{RecordID: *toRecord, Time: at}, o.opts())
	if err != nil {
		return actionErr(err, o.process)
	}
	printEntry(stdout, e)
	return nil
}

func pauseCmd(pause bool) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		name, act := "resume", cursor.Resume
		if pause {
			name, act = "pause", cursor.Pause
		}
		_, err := processAction(ctx, name, args, stdout, stderr, act)
		return err
	}
}

// processAction runs an operator command that takes only the shared flags: it parses them, runs act on
// the process and prints its audit entry.
func processAction(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	act func(context.Context, cursor.DB, string, cursor.ActionOpts) (cursor.AuditEntry, error)) (cursor.AuditEntry, error) {
	fs := newFlagSet(name, stderr)
	var o opFlags
	o.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return cursor.AuditEntry{}, err
	}
	if err := o.check(false); err != nil {
		return cursor.AuditEntry{}, err
	}
	conn, err := o.connect(ctx)
	if err != nil {
		return cursor.AuditEntry{}, err
	}
	defer conn.Close(ctx)
	e, err := act(ctx, conn, o.process, o.opts())
	if err != nil {
		return e, actionErr(err, o.process)
	}
	printEntry(stdout, e)
	return e, nil
}

func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	process := fs.String("process", "", "show only this process")
	limit := fs.Int("limit", 50, "newest entries to show")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	conn, err := connect(ctx, &dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	entries, err := cursor.Audit(ctx, conn, cursor.AuditOpts{Process: *process, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"entries": entries})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	// The reason comes last and whole, and who acted is shown in full but for very long names: an audit
	// trail should say who and why.
	fmt.Fprintln(tw, "AT\tPROCESS\tACTION\tBY\tRECORD\tDETAIL\tREASON")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05"), clip(e.Process, 20),
			e.Action, clip(e.Actor, 48), clip(e.Role, 24), clip(e.RecordID, 24), auditDetail(e.Detail),
			oneLineText(e.Reason))
	}
	return tw.Flush()
}

// auditDetail sums up what a prune or a forget did, for the audit table.
func auditDetail(d *cursor.AuditDetail) string {
	switch {
	case d == nil:
		return ""
	case d.Rows > 0 && d.Before != nil:
		return fmt.Sprintf("%d rows of %s created before %s", d.Rows, clip(d.Table, 40), d.Before.UTC().Format(time.RFC3339))
	case len(d.Streams) == 1:
		return "its cursor row removed"
	case len(d.Streams) > 1:
		return fmt.Sprintf("%d cursor rows removed", len(d.Streams))
	case len(d.Keys) == 1 && d.Through != nil:
		return fmt.Sprintf("parked record dropped; %d records of key %s redriven", d.Keys[0].Records, clip(d.Keys[0].Key, 30))
	case len(d.Keys) > 0:
		n := 0
		for _, k := range d.Keys {
			n += k.Records
		}
		if len(d.Keys) == 1 {
			return fmt.Sprintf("key %s redriven (%d records)", clip(d.Keys[0].Key, 30), n)
		}
		return fmt.Sprintf("%d keys redriven (%d records)", len(d.Keys), n)
	}
	return ""
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
	// The source, for the index hint: the single stream's, or any partition's (gone after the split).
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{Process: o.process})
	if err != nil {
		return err
	}
	var src inordertype.Source
	for _, p := range procs {
		for _, s := range p.Streams {
			if s.Source.Table != "" {
				src = s.Source
			}
		}
	}
	e, err := cursor.Repartition(ctx, conn, o.process, *n, o.opts())
	if err != nil {
		return actionErr(err, o.process)
	}
	at := *e.PositionAfter
	printEntry(stdout, e)
	fmt.Fprintf(stdout, "inorder: %s now has %d partitions, each starting at %s; create their index before running: "+
		"inorder migrate --partition-index %s:%s:%d\n", o.process, *n, at, src.Table, src.KeyColumn, *n)
	return nil
}

func parkedCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("parked", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	process := fs.String("process", "", "process whose parked keys to list (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *process == "" {
		return usageErr("--process is required")
	}
	conn, err := connect(ctx, &dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{Process: *process})
	if err != nil {
		return err
	}
	if len(procs) == 0 {
		return fmt.Errorf("no process named %q", *process)
	}
	keys, err := cursor.Parked(ctx, conn, *process)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if keys == nil {
			keys = []cursor.ParkedKey{}
		}
		return enc.Encode(map[string]any{"process": *process, "keys": keys})
	}
	if len(keys) == 0 {
		fmt.Fprintf(stdout, "inorder: no key is parked in %s\n", *process)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tRECORDS\tHEAD\tPARKED SINCE\tATTEMPTS\tSTREAM\tERROR")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", clip(k.Key, 30), k.Records, clip(k.Head, 20),
			k.Since.UTC().Format("2006-01-02 15:04:05"), k.Attempts, clip(k.Stream, 30), clip(oneLineText(k.Error), 100))
	}
	return tw.Flush()
}

func redriveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("redrive", stderr)
	var o opFlags
	o.register(fs, false)
	key := fs.String("key", "", "the parked key to deliver (or --all)")
	all := fs.Bool("all", false, "deliver every parked key of the process")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.check(false); err != nil {
		return err
	}
	if (*key == "") == !*all {
		return usageErr("give exactly one of --key and --all")
	}
	conn, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	e, err := cursor.Redrive(ctx, conn, o.process, cursor.RedriveOpts{ActionOpts: o.opts(), Key: *key, All: *all})
	if err != nil {
		return actionErr(err, o.process)
	}
	printEntry(stdout, e)
	fmt.Fprintf(stdout, "inorder: %s; the owning instance delivers them in order within a probe interval (inorder parked shows what is left)\n",
		auditDetail(e.Detail))
	return nil
}
