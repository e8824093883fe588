package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
)

// statusReport is the documented JSON form of `inorder status --json`. Fields are only ever added.
type statusReport struct {
	Processes []processStatus `json:"processes"`
}

type processStatus struct {
	Process string `json:"process"`
	// State is running, idle, retrying, halted, held, paused or not running; "partitioned" on the parent row of a
	// process split into partitions, each of which has a row of its own named "<process>#<i>/<n>".
	State      string `json:"state"`
	Partitions int    `json:"partitions,omitempty"`
	Paused     bool   `json:"paused"`
	// RecordsHandled counts advances since the process was registered; Throughput is records per
	// second over about the last minute.
	RecordsHandled int64        `json:"records_handled"`
	Throughput     float64      `json:"throughput_per_second"`
	Locked         bool         `json:"locked"`
	Holder         string       `json:"holder,omitempty"`
	HolderPID      int          `json:"holder_pid,omitempty"`
	Epoch          int64        `json:"owner_epoch"`
	LeaseExpiresAt *time.Time   `json:"lease_expires_at"`
	Connected      int          `json:"instances_connected"`
	Position       positionJSON `json:"position"`
	Source         *sourceJSON  `json:"source,omitempty"`
	Behind         *behindJSON  `json:"behind,omitempty"`
	Halt           *haltJSON    `json:"halt"`
	Hold           *holdJSON    `json:"hold"`
	InFlight       *flightJSON  `json:"in_flight"`
	Error          string       `json:"error,omitempty"`
	UpdatedAt      time.Time    `json:"updated_at"`
}

// flightJSON is what a keyed window had in flight at the last checkpoint.
type flightJSON struct {
	Records     int       `json:"records"`
	OldestSince time.Time `json:"oldest_since"`
}

type positionJSON struct {
	CreatedAt *time.Time `json:"created_at"`
	ID        *string    `json:"id"`
}

type sourceJSON struct {
	Table           string         `json:"table"`
	IDColumn        string         `json:"id_column"`
	CreatedAtColumn string         `json:"created_at_column"`
	KeyColumn       string         `json:"key_column,omitempty"`
	Partition       *partitionJSON `json:"partition,omitempty"`
}

type partitionJSON struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

type behindJSON struct {
	Rows             int64      `json:"rows"`
	Capped           bool       `json:"capped"`
	OldestCreatedAt  *time.Time `json:"oldest_created_at"`
	OldestAgeSeconds float64    `json:"oldest_age_seconds"`
}

type haltJSON struct {
	RecordID       string     `json:"record_id"`
	Error          string     `json:"error"`
	Permanent      bool       `json:"permanent"`
	Status         *int       `json:"status"`
	Attempts       int        `json:"attempts"`
	FirstFailureAt time.Time  `json:"first_failure_at"`
	LastFailureAt  time.Time  `json:"last_failure_at"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	// HaltedAt is when the stream counted as halted; null while it is only retrying the record.
	HaltedAt *time.Time `json:"halted_at"`
}

type holdJSON struct {
	WriterPID int       `json:"writer_pid"`
	Since     time.Time `json:"since"`
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	process := fs.String("process", "", "show only this process")
	asJSON := fs.Bool("json", false, "print JSON (the documented, stable form)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	conn, err := connect(ctx, dbURL.get())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rep, err := buildStatus(ctx, conn, *process)
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

func buildStatus(ctx context.Context, conn *pgx.Conn, name string) (statusReport, error) {
	infos, err := cursor.List(ctx, conn, name)
	if err != nil {
		return statusReport{}, err
	}
	rep := statusReport{Processes: []processStatus{}}
	for _, in := range infos {
		ps := processStatus{
			Process: in.Process, Locked: in.Locked, Holder: in.Holder, HolderPID: in.HolderPID, Epoch: in.Epoch,
			LeaseExpiresAt: timeOrNil(in.LeaseExpiresAt),
			Connected:      in.Connected, UpdatedAt: in.UpdatedAt, Paused: in.Paused,
			RecordsHandled: in.RecordsHandled, Throughput: in.Throughput, Partitions: in.Partitions,
		}
		if !in.Position.IsBeginning() {
			at := in.Position.CreatedAt
			ps.Position.CreatedAt = &at
			if in.Position.ID != "" {
				id := in.Position.ID
				ps.Position.ID = &id
			}
		}
		if in.Halt != nil {
			ps.Halt = &haltJSON{RecordID: in.Halt.RecordID, Error: in.Halt.Error, Attempts: in.Halt.Attempts,
				Permanent: in.Halt.Permanent, FirstFailureAt: in.Halt.FirstFailureAt.UTC(),
				LastFailureAt: in.Halt.LastFailureAt.UTC()}
			if in.Halt.Status != 0 {
				code := in.Halt.Status
				ps.Halt.Status = &code
			}
			if !in.Halt.NextAttemptAt.IsZero() {
				next := in.Halt.NextAttemptAt.UTC()
				ps.Halt.NextAttemptAt = &next
			}
			if !in.Halt.Retrying() {
				at := in.Halt.HaltedAt.UTC()
				ps.Halt.HaltedAt = &at
			}
		}
		if !in.HeldSince.IsZero() {
			ps.Hold = &holdJSON{WriterPID: in.HeldByPID, Since: in.HeldSince.UTC()}
		}
		if in.InFlight > 0 && (in.Locked || in.Connected > 0) {
			ps.InFlight = &flightJSON{Records: in.InFlight, OldestSince: in.InFlightSince.UTC()}
		}
		if in.Source.Table != "" {
			ps.Source = &sourceJSON{Table: in.Source.Table, IDColumn: in.Source.IDColumn,
				CreatedAtColumn: in.Source.CreatedAtColumn, KeyColumn: in.Source.KeyColumn}
			if pt := in.Source.Partition; pt != nil {
				ps.Source.Partition = &partitionJSON{Index: pt.Index, Count: pt.Count}
			}
			lag, err := cursor.Behind(ctx, conn, in)
			if err != nil {
				ps.Error = err.Error()
			} else {
				ps.Behind = &behindJSON{Rows: lag.Rows, Capped: lag.Capped}
				if !lag.Oldest.IsZero() {
					o := lag.Oldest
					ps.Behind.OldestCreatedAt = &o
					ps.Behind.OldestAgeSeconds = lag.Now.Sub(o).Seconds()
				}
			}
		}
		ps.State = stateOf(in, ps.Behind)
		rep.Processes = append(rep.Processes, ps)
	}
	return rep, nil
}

func stateOf(in cursor.Info, behind *behindJSON) string {
	switch {
	case in.Partitions > 0:
		return "partitioned"
	case in.Paused:
		return "paused"
	case in.Halt != nil && in.Halt.Retrying():
		return "retrying"
	case in.Halt != nil:
		return "halted"
	case in.Connected == 0 && !in.Locked:
		return "not running"
	case !in.HeldSince.IsZero() && behind != nil && behind.Rows > 0:
		return "held"
	case behind != nil && behind.Rows > 0:
		return "running"
	default:
		return "idle"
	}
}

// printStatus prints a table that fits 100 columns, with a line of detail under a halted or held stream.
func printStatus(w io.Writer, rep statusReport) {
	if len(rep.Processes) == 0 {
		fmt.Fprintln(w, "no processes yet: `inorder run` registers one on first start")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPOSITION\tBEHIND\tOLDEST\tRATE/S\tHOLDER")
	for _, ps := range rep.Processes {
		pos := "beginning"
		if ps.Position.CreatedAt != nil {
			pos = ps.Position.CreatedAt.Format("2006-01-02T15:04:05.000Z")
			if ps.Position.ID != nil {
				pos += "/" + *ps.Position.ID
			}
		}
		behind, oldest := "?", "-"
		if ps.Behind != nil {
			behind = fmt.Sprint(ps.Behind.Rows)
			if ps.Behind.Capped {
				behind = ">" + behind
			}
			if ps.Behind.OldestCreatedAt != nil {
				oldest = humanAge(ps.Behind.OldestAgeSeconds)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f\t%s\n", clip(ps.Process, 20), ps.State, clip(pos, 30), behind, oldest,
			ps.Throughput, holder)
	}
	tw.Flush()
	for _, ps := range rep.Processes {
		if ps.Halt != nil {
			kind := "retryable"
			if ps.Halt.Permanent {
				kind = "refused by the sink"
			}
			if ps.Halt.Status != nil {
				kind += fmt.Sprintf(", status %d", *ps.Halt.Status)
			}
			next := ""
			if ps.Halt.NextAttemptAt != nil {
				next = ", next " + ps.Halt.NextAttemptAt.Format(time.RFC3339)
			}
			what := "halted on"
			if ps.Halt.HaltedAt == nil {
				what = "retrying"
			}
			fmt.Fprintf(w, "\n%s\n%s\n"+
				"  fix the sink or the record; the stream resumes by itself once the record goes through\n",
				wrap(fmt.Sprintf("%s %s record %s (%s): %s since %s (last %s%s)", ps.Process, what, ps.Halt.RecordID,
					kind, plural(ps.Halt.Attempts, "attempt"), ps.Halt.FirstFailureAt.Format(time.RFC3339),
					ps.Halt.LastFailureAt.Format(time.RFC3339), next), "", 100),
				wrap("error: "+clip(ps.Halt.Error, 600), "  ", 100))
			fmt.Fprintln(w, wrap(fmt.Sprintf("or, once the record is known to be unwanted: inorder skip --process %s --record %s --reason '...'",
				ps.Process, ps.Halt.RecordID), "  ", 100))
		}
		if ps.Hold != nil {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s held by %s, in flight since %s (%s): records after its start "+
				"wait until it commits or rolls back; a session idle in transaction is the usual cause.",
				ps.Process, holdName(ps.Hold.WriterPID), ps.Hold.Since.Format(time.RFC3339),
				humanAge(time.Since(ps.Hold.Since).Seconds())), "", 100))
			if ps.Hold.WriterPID != 0 {
				fmt.Fprintln(w, wrap(fmt.Sprintf("Look: SELECT state, xact_start, query FROM pg_stat_activity WHERE pid = %d",
					ps.Hold.WriterPID), "  ", 100))
			} else {
				fmt.Fprintln(w, wrap("Look: SELECT gid, prepared, owner FROM pg_prepared_xacts; end it with COMMIT PREPARED or ROLLBACK PREPARED", "  ", 100))
			}
		}
		if f := ps.InFlight; f != nil {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("%s: %s in flight at the last checkpoint, the oldest since %s (%s)",
				ps.Process, plural(f.Records, "record"), f.OldestSince.Format(time.RFC3339),
				humanAge(time.Since(f.OldestSince).Seconds())), "", 100))
		}
		if ps.Error != "" {
			fmt.Fprintf(w, "\n%s: cannot measure lag: %s\n", ps.Process, ps.Error)
		}
	}
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

// timeOrNil is t in UTC, or nil for the zero time, for a JSON field that is null when unset.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
