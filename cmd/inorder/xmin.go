package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/inorder-dev/inorder/internal/xmin"
)

// printXminHold prints, after the processes, who has held the database's xmin horizon past the threshold:
// each holder with what the role may see of it, what it costs, and the statements to look at it and end it.
// When none has, and the holder of the oldest xmin is one a single look cannot time, it names that one in a
// line, saying why its age is unknown.
func printXminHold(w io.Writer, rep statusReport) {
	if rep.XminHoldError != "" {
		fmt.Fprintf(w, "\n%s\n", wrap("cannot look at the xmin horizon: "+rep.XminHoldError, "", 100))
		return
	}
	h := rep.XminHold
	if h == nil {
		return
	}
	if !h.Held() {
		if o := h.Oldest; o != nil && o.SinceFrom == xmin.SinceFirstSeen {
			fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("The oldest xmin of the database (%s old) is held by %s; "+
				"how long, a single look cannot tell: %s.", plural(int(o.XminAge), "transaction"), xminName(*o, h.Database),
				untimed(*o)), "", 100))
		}
		return
	}
	for _, x := range h.Holders {
		fmt.Fprintf(w, "\n%s\n", wrap(fmt.Sprintf("The xmin horizon has been held for %s%s by %s%s.",
			atLeast(x), humanAge(x.Held.Seconds()), xminName(x, h.Database), xminDetail(x)), "", 100))
		xminCommands(w, x)
	}
	fmt.Fprintf(w, "\n%s\n", wrap("What it costs: "+xmin.HoldCost+".", "", 100))
}

// atLeast is "at least " for a holder timed from when it was first seen, which held it already then.
func atLeast(x xmin.Holder) string {
	if x.SinceFrom == xmin.SinceFirstSeen {
		return "at least "
	}
	return ""
}

// xminName names a holder (xmin.Holder.Name), saying why one of another database counts.
func xminName(x xmin.Holder, here string) string {
	if x.Database != "" && x.Database != here && (x.Kind == xmin.Backend || x.Kind == xmin.Prepared) {
		return x.Name() + ", another database: its transaction id holds this one's, since every snapshot taken " +
			"here counts it as running"
	}
	return x.Name()
}

// xminDetail is what else status knows of a holder: its state and times, or why they are hidden, and how
// old its xmin is.
func xminDetail(x xmin.Holder) string {
	var parts []string
	switch {
	case x.Kind == xmin.Prepared:
		parts = append(parts, "prepared "+x.Prepared.UTC().Format(time.RFC3339))
	case x.StartHidden:
		parts = append(parts, "first seen "+x.Since.UTC().Format(time.RFC3339)+"; its state and start are hidden "+
			"from this role: granting it pg_read_all_stats, or pg_monitor, shows them")
	case x.Kind == xmin.Backend:
		if x.State != "" {
			parts = append(parts, x.State)
		}
		if !x.XactStart.IsZero() {
			parts = append(parts, "transaction started "+x.XactStart.UTC().Format(time.RFC3339))
		}
		if !x.QueryStart.IsZero() {
			parts = append(parts, "last query started "+x.QueryStart.UTC().Format(time.RFC3339))
		}
		if x.SinceFrom == xmin.SinceFirstSeen {
			parts = append(parts, "held since first seen "+x.Since.UTC().Format(time.RFC3339))
		}
	default:
		parts = append(parts, "first seen "+x.Since.UTC().Format(time.RFC3339))
	}
	what := "its snapshot's xmin"
	if x.OwnXid {
		what = "its own transaction id"
	}
	parts = append(parts, fmt.Sprintf("%s is %s old", what, plural(int(x.XminAge), "transaction")))
	return ": " + strings.Join(parts, "; ")
}

// untimed says why a single look cannot time a holder.
func untimed(x xmin.Holder) string {
	if x.StartHidden {
		return "its start is hidden from this role (granting it pg_read_all_stats, or pg_monitor, shows it); " +
			"the console and the metrics time it from when they first see it"
	}
	return "Postgres keeps no start for it; the console and the metrics time it from when they first see it"
}

// xminCommands prints the statements to look at a holder and to end it.
func xminCommands(w io.Writer, x xmin.Holder) {
	switch x.Kind {
	case xmin.Prepared:
		fmt.Fprintf(w, "  look, and end it in database %s with COMMIT PREPARED or ROLLBACK PREPARED:\n%s\n%s\n",
			x.Database, command("SELECT gid, prepared, owner, database FROM pg_prepared_xacts WHERE gid = %s;", sqlString(x.GID)),
			command("ROLLBACK PREPARED %s;", sqlString(x.GID)))
	case xmin.Slot:
		fmt.Fprintf(w, "  look; a slot whose standby is gone for good is dropped with:\n%s\n%s\n",
			command("SELECT slot_name, slot_type, active, active_pid, xmin FROM pg_replication_slots WHERE slot_name = %s;", sqlString(x.Slot)),
			command("SELECT pg_drop_replication_slot(%s);", sqlString(x.Slot)))
	case xmin.Standby:
		fmt.Fprintf(w, "  a query on the standby holds it; look, and end that query on the standby:\n%s\n",
			command("SELECT pid, application_name, client_addr, backend_xmin FROM pg_stat_replication WHERE pid = %d;", x.PID))
	default:
		fmt.Fprintf(w, "  look, and end it if it is forgotten:\n%s\n%s\n",
			command("SELECT pid, datname, usename, application_name, state, xact_start, query FROM pg_stat_activity WHERE pid = %d;", x.PID),
			command("SELECT pg_terminate_backend(%d);", x.PID))
	}
}

// sqlString is s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
