package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/xmin"
)

// statusReport is the documented JSON form of `inorder status --json`: each process as cursor.Info encodes
// itself, and beside them who holds the database's xmin horizon, which is the database's and no process's.
// Fields are only ever added.
type statusReport struct {
	Processes []cursor.Info `json:"processes"`
	// XminHold is a look at who has held the database's xmin horizon past --xmin-hold-after; null when
	// the look failed, and XminHoldError then says why (status goes on without it).
	XminHold      *xmin.Hold `json:"xmin_hold"`
	XminHoldError string     `json:"xmin_hold_error,omitempty"`
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	process := fs.String("process", "", "show only this process")
	asJSON := fs.Bool("json", false, "print JSON (the documented, stable form)")
	holdAfter := fs.Duration("xmin-hold-after", xmin.DefaultHoldAfter, "name what has held the database's xmin horizon "+
		"(vacuum's) longer than this: a session, a prepared transaction, a replication slot or a standby's feedback")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *holdAfter <= 0 {
		return usageErr("--xmin-hold-after must be positive, got %s", *holdAfter)
	}
	conn, err := connect(ctx, &dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rep, err := buildStatus(ctx, conn, *process, *holdAfter)
	if err != nil {
		return err
	}
	if *process != "" && len(rep.Processes) == 0 {
		return fmt.Errorf("no process named %q", *process)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatus(stdout, rep)
	return nil
}

func buildStatus(ctx context.Context, conn *pgx.Conn, name string, holdAfter time.Duration) (statusReport, error) {
	procs, err := cursor.Read(ctx, conn, cursor.ReadOpts{Process: name})
	if err != nil {
		return statusReport{}, err
	}
	// Every cursor row, by name: a process's own and, when status is not asked of one process, its
	// partitions'.
	var infos []cursor.Info
	for _, p := range procs {
		infos = append(infos, p.Info)
		if p.Partitioned() && name == "" {
			infos = append(infos, p.Streams...)
		}
	}
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].Process < infos[j].Process })
	for i := range infos {
		_ = infos[i].Measure(ctx, conn) // a failure is in LagError, printed beside the process
	}
	rep := statusReport{Processes: append([]cursor.Info{}, infos...)}
	if hold, err := xmin.Look(ctx, conn, holdAfter); err != nil {
		rep.XminHoldError = err.Error() // printed after the processes
	} else {
		rep.XminHold = &hold
	}
	return rep, nil
}

// printStatus prints a table that fits 100 columns, with a line of detail under a halted or held stream,
// and then who has held the database's xmin horizon.
func printStatus(w io.Writer, rep statusReport) {
	printProcesses(w, rep)
	printXminHold(w, rep)
}

// printProcesses prints the table of processes and the details under it.
func printProcesses(w io.Writer, rep statusReport) {
	if len(rep.Processes) == 0 {
		fmt.Fprintln(w, "no processes yet: `inorder run` registers one on first start")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPOSITION\tBEHIND\tOLDEST\tRATE/S\tHOLDER")
	for _, ps := range rep.Processes {
		pos := "beginning"
		if !ps.Position.IsBeginning() {
			pos = ps.Position.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")
			if ps.Position.ID != "" {
				pos += "/" + ps.Position.ID
			}
		}
		behind, oldest := "?", "-"
		if lag := ps.Lag; lag != nil {
			behind = fmt.Sprint(lag.Rows)
			if lag.Capped {
				behind = ">" + behind
			}
			if !lag.Oldest.IsZero() {
				oldest = humanAge(lag.Now.Sub(lag.Oldest).Seconds())
			}
		}
		holder := "-"
		switch {
		case ps.HolderPID != 0:
			holder = fmt.Sprintf("%s (pid %d)", clip(ps.Holder, 20), ps.HolderPID)
		case ps.Holder != "":
			holder = clip(ps.Holder, 20) // through a pooler: no session of its own to name
		case ps.Locked:
			holder = "locked"
		}
		if standby := ps.Connected - btoi(ps.Locked); standby > 0 {
			holder += fmt.Sprintf(" +%d standing by", standby)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f\t%s\n", clip(ps.Process, 20), ps.Status, clip(pos, 30), behind, oldest,
			ps.Throughput, holder)
	}
	tw.Flush()
	for _, ps := range rep.Processes {
		if ps.SourceWait != "" && ps.Halt == nil && ps.Status != cursor.StatusNotRunning {
			// A migration took a column the stream needs: nothing to retry or skip, the table to fix.
			fmt.Fprintf(w, "\n%s\n%s\n", wrap(fmt.Sprintf("%s waits for its source table to fit again; nothing is "+
				"halted, skipped or parked, and it reads on by itself once the table fits.", ps.Process), "", 100),
				wrap("fix: "+ps.SourceWait, "  ", 100))
		}
		if h := ps.Halt; h != nil && ps.Status == cursor.StatusNotRunning && h.Retrying() {
			// Nobody waits for the sink now: say what the last run met, for whoever starts it again.
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s is not running. When it last ran, record %s was failing (%s so far): %s",
				ps.Process, h.RecordID, plural(h.Attempts, "attempt"), clip(h.Error, 300)), "", 100))
		} else if h := ps.Halt; h != nil && h.SinkUnavailable() {
			// The sink's outage: nothing about the record to fix or skip.
			status := ""
			if h.Status != 0 {
				status = fmt.Sprintf(" (status %d)", h.Status)
			}
			next := ""
			if !h.NextAttemptAt.IsZero() {
				next = ", next " + h.NextAttemptAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "\n%s\n%s\n%s\n  to try again now:\n%s\n",
				wrap(fmt.Sprintf("%s waits for the sink, unavailable since %s: record %s meets a refusal every record "+
					"would meet%s; %s so far%s. Nothing is halted or parked for it; the stream flows again by itself "+
					"once the sink accepts.", ps.Process, h.FirstFailureAt.UTC().Format(time.RFC3339), h.RecordID, status,
					plural(h.Attempts, "attempt"), next), "", 100),
				wrap("check: "+h.Unavailable, "  ", 100), wrap("error: "+clip(h.Error, 600), "  ", 100),
				command("inorder retry --process %s", ps.Process))
		} else if h != nil {
			kind := "retryable"
			if h.Permanent {
				kind = "refused by the sink"
			}
			if h.Status != 0 {
				kind += fmt.Sprintf(", status %d", h.Status)
			}
			next := ""
			if !h.NextAttemptAt.IsZero() {
				next = ", next " + h.NextAttemptAt.UTC().Format(time.RFC3339)
			}
			what := "halted on"
			if h.Retrying() {
				what = "retrying"
			}
			fmt.Fprintf(w, "\n%s\n%s\n"+
				"  fix the sink or the record; the stream resumes by itself once the record goes through,\n"+
				"  or at once with:\n%s\n",
				wrap(fmt.Sprintf("%s %s record %s (%s): %s since %s (last %s%s)", ps.Process, what, h.RecordID,
					kind, plural(h.Attempts, "attempt"), h.FirstFailureAt.UTC().Format(time.RFC3339),
					h.LastFailureAt.UTC().Format(time.RFC3339), next), "", 100),
				wrap("error: "+clip(h.Error, 600), "  ", 100), command("inorder retry --process %s", ps.Process))
			fmt.Fprintf(w, "  or, once the record is known to be unwanted:\n%s\n",
				command("inorder skip --process %s --record %s --reason '...'", ps.Process, h.RecordID))
		}
		if !ps.HeldSince.IsZero() {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s held by %s, in flight since %s (%s): records after its start "+
				"wait until it commits or rolls back; a session idle in transaction is the usual cause.",
				ps.Process, holdName(ps.HeldByPID), ps.HeldSince.UTC().Format(time.RFC3339),
				humanAge(time.Since(ps.HeldSince).Seconds())), "", 100))
			if ps.HeldByPID != 0 {
				fmt.Fprintf(w, "  look:\n%s\n", command("SELECT state, xact_start, query FROM pg_stat_activity WHERE pid = %d;",
					ps.HeldByPID))
			} else {
				fmt.Fprintf(w, "  look, and end it with COMMIT PREPARED or ROLLBACK PREPARED:\n%s\n",
					command("SELECT gid, prepared, owner FROM pg_prepared_xacts;"))
			}
		}
		if ps.LateRows > 0 {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s: %s found committed behind the position after it had passed "+
				"them, the last at %s, and not delivered; its log says where they lie and the rewind that delivers them",
				ps.Process, plural(int(ps.LateRows), "row"), ps.LateAt.UTC().Format(time.RFC3339)), "", 100))
		}
		if ps.Source.Where != "" {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s delivers only the rows of %s where %s; it moves past the "+
				"others without a handler call (BEHIND counts them too)", ps.Process, ps.Source.Table, ps.Source.Where), "", 100))
		}
		if h := ps.Source.Horizon; h == inordertype.HorizonWriters || h == inordertype.HorizonTransactions {
			fmt.Fprintf(w, "\n%s\n%s\n", wrap(fmt.Sprintf("%s reads %s by created_at (the %s horizon, opted in): a "+
				"created_at the application writes earlier than rows already read is skipped; the insert clock cannot be:",
				ps.Process, ps.Source.Table, h), "", 100), command("inorder migrate --table %s", ps.Source.Table))
		}
		if ps.InFlight > 0 && (ps.Locked || ps.Connected > 0) {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s: %s in flight at the last checkpoint, the oldest since %s (%s)",
				ps.Process, plural(ps.InFlight, "record"), ps.InFlightSince.UTC().Format(time.RFC3339),
				humanAge(time.Since(ps.InFlightSince).Seconds())), "", 100))
		}
		if ps.ParkedKeys > 0 {
			fmt.Fprintf(w, "\n%s\n  see them:\n%s\n  once the sink accepts them:\n%s\n",
				wrap(fmt.Sprintf("%s: %s parked (%s), the longest since %s (%s); the other keys go on",
					ps.Process, plural(ps.ParkedKeys, "key"), plural(ps.ParkedRecords, "record"),
					ps.ParkedSince.UTC().Format(time.RFC3339), humanAge(time.Since(ps.ParkedSince).Seconds())), "", 100),
				command("inorder parked --process %s", ps.Process), command("inorder redrive --process %s --all", ps.Process))
		}
		if ps.LagError != "" {
			fmt.Fprintf(w, "\n%s: cannot measure lag: %s\n", ps.Process, ps.LagError)
		}
	}
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// plural says "1 attempt", "2 attempts".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// holdName names the transaction holding a stream: a backend by pid, or a prepared transaction (pid 0).
func holdName(pid int) string {
	if pid == 0 {
		return "a prepared transaction"
	}
	return fmt.Sprintf("the open transaction of backend pid %d", pid)
}

func humanAge(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// command is a command for the reader to copy, on a line of its own and never wrapped, however long:
// a command broken over two lines cannot be pasted.
func command(format string, args ...any) string {
	return "    " + fmt.Sprintf(format, args...)
}

// wrap breaks text into lines of at most width runes, each starting with indent, at spaces where it can.
func wrap(text, indent string, width int) string {
	if width <= len([]rune(indent)) {
		width = len([]rune(indent)) + 1 // room for one rune a line at least
	}
	var lines []string
	line := indent
	for _, word := range strings.Fields(text) {
		for len([]rune(indent+word)) > width { // a word longer than a line is cut
			r := []rune(word)
			cut := width - len([]rune(indent))
			if line != indent {
				lines, line = append(lines, line), indent
			}
			lines = append(lines, indent+string(r[:cut]))
			word = string(r[cut:])
		}
		switch {
		case line == indent:
			line += word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), indent+word
		}
	}
	return strings.Join(append(lines, line), "\n")
}
