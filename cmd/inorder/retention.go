package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/setting"
)

// parseAge reads a duration as Go writes one (90m, 720h) or a whole number of days (30d).
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("not a number of days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func pruneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("prune", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	table := fs.String("table", "", "source table to prune (required)")
	olderThan := fs.String("older-than", "", "delete rows created longer ago than this by the database's clock (720h, 30d)")
	before := fs.String("before", "", "delete rows created before this RFC 3339 time")
	dryRun := fs.Bool("dry-run", false, "say how many rows and up to where, delete nothing")
	batch := fs.Int("batch", setting.DefaultPruneBatch, "rows deleted per batch, each batch its own short transaction")
	var actorFlag flagWithDefault
	registerActor(fs, &actorFlag, "whoever prunes")
	reason := fs.String("reason", "", "why, recorded in the audit")
	wait := fs.Duration("wait", 10*time.Second, "how long a batch waits for a lock (a rewind, a registering process)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	actor := actorFlag.get()
	opts := cursor.PruneOpts{Table: *table, DryRun: *dryRun, BatchSize: *batch,
		ActionOpts: cursor.ActionOpts{Actor: actor, Reason: *reason, Wait: *wait}}
	switch {
	case *table == "":
		return usageErr("--table is required")
	case (*olderThan == "") == (*before == ""):
		return usageErr("give exactly one of --older-than and --before")
	case *batch < 1:
		return usageErr("--batch must be at least 1")
	case actor == "" && !*dryRun:
		return usageErr("--actor is required: who prunes, for the audit")
	}
	if *olderThan != "" {
		d, err := parseAge(*olderThan)
		if err != nil || d <= 0 {
			return usageErr("--older-than %q is not a positive duration (e.g. 720h or 30d)", *olderThan)
		}
		opts.OlderThan = d
	} else {
		at, err := time.Parse(time.RFC3339Nano, *before)
		if err != nil {
			return usageErr("--before %q is not an RFC 3339 time (e.g. 2024-05-06T07:08:09Z)", *before)
		}
		opts.Before = at
	}
	conn, err := connect(ctx, &dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	res, err := cursor.Prune(ctx, conn, opts)
	if err != nil {
		if res.Rows > 0 { // an interrupted prune still says what it deleted
			return fmt.Errorf("deleted %d rows of %s through %s (audited), then: %w", res.Rows, res.Table, res.Through, err)
		}
		return err
	}
	if *asJSON {
		return printPruneJSON(stdout, res)
	}
	for _, e := range res.Entries {
		printEntry(stdout, e)
	}
	cut := res.Cut.UTC().Format(time.RFC3339Nano)
	switch {
	case res.DryRun:
		fmt.Fprintf(stdout, "inorder: dry run: would prune %d rows of %s created before %s%s; nothing deleted\n",
			res.Rows, res.Table, cut, through(res))
	default:
		fmt.Fprintf(stdout, "inorder: pruned %d rows of %s created before %s%s, in %d batches\n",
			res.Rows, res.Table, cut, through(res), res.Batches)
	}
	if l := res.Limit; l != nil {
		fmt.Fprintf(stdout, "inorder: every process of %s has passed %s; %s holds the prune there%s\n",
			res.Table, res.Passed, stream(*l), note(l.Note))
	} else if res.Passed.IsBeginning() || res.Passed.CreatedAt.Before(res.Cut) {
		fmt.Fprintf(stdout, "inorder: the processes of %s furthest back stand together at %s, before the cut-off: "+
			"the prune stops there\n", res.Table, res.Passed)
	} else {
		fmt.Fprintf(stdout, "inorder: every process of %s has passed the cut-off (the furthest back is at %s)\n",
			res.Table, res.Passed)
	}
	if res.DryRun {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tPOSITION\tNOTE")
		for _, r := range res.Readers {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", clip(stream(r), 32), r.Position, r.Note)
		}
		return tw.Flush()
	}
	return nil
}

func through(res cursor.PruneResult) string {
	if res.Rows == 0 {
		return ""
	}
	return ", through " + res.Through.String()
}

// stream names a process, and its partition when that is what stands furthest back.
func stream(r cursor.PruneReader) string {
	if r.Stream == "" || r.Stream == r.Process {
		return r.Process
	}
	return r.Stream
}

func note(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// pruneReport is `inorder prune --json`: its fields are only ever added to.
type pruneReport struct {
	Table     string                `json:"table"`
	Cut       time.Time             `json:"cut"`
	DryRun    bool                  `json:"dry_run"`
	Rows      int64                 `json:"rows"`
	Through   *inordertype.Position `json:"through"`
	Passed    inordertype.Position  `json:"passed"`
	LimitedBy *pruneReader          `json:"limited_by"`
	Processes []pruneReader         `json:"processes"`
	Batches   int                   `json:"batches"`
	Entries   []cursor.AuditEntry   `json:"audit_entries"`
}

type pruneReader struct {
	Process  string               `json:"process"`
	Stream   string               `json:"stream"`
	Position inordertype.Position `json:"position"`
	Note     string               `json:"note"`
}

func printPruneJSON(w io.Writer, res cursor.PruneResult) error {
	rep := pruneReport{Table: res.Table, Cut: res.Cut.UTC(), DryRun: res.DryRun, Rows: res.Rows, Passed: res.Passed,
		Processes: []pruneReader{}, Batches: res.Batches, Entries: res.Entries}
	if rep.Entries == nil {
		rep.Entries = []cursor.AuditEntry{}
	}
	if res.Rows > 0 {
		rep.Through = &res.Through
	}
	for _, r := range res.Readers {
		rep.Processes = append(rep.Processes, pruneReader(r))
	}
	if l := res.Limit; l != nil {
		r := pruneReader(*l)
		rep.LimitedBy = &r
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func forgetCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e, err := processAction(ctx, "forget", args, stdout, stderr, cursor.Forget)
	if err != nil {
		return err
	}
	rows := "its cursor row, at " + e.PositionBefore.String()
	if n := len(e.Detail.Streams); n > 1 {
		rows = fmt.Sprintf("its %d cursor rows", n)
	}
	fmt.Fprintf(stdout, "inorder: forgot %s (%s); run again, it starts afresh: from the beginning, or with "+
		"--start-from now from then\n", e.Process, rows)
	return nil
}
