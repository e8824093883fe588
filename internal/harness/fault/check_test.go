package fault

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/inorder-dev/inorder/internal/store"
)

// report is what the checks found for one stream.
type report struct {
	process     string
	writes      int // committed rows
	delivered   int // committed rows delivered at least once
	lost        int // committed rows never delivered
	phantoms    int // deliveries of rows that never committed
	redelivered int // deliveries beyond the first of a record
	reorders    int // first deliveries of an aggregate's record after one with a higher seq
	orderBreaks int // first deliveries out of the stream's order (see orders)
	crashes     int
	rewinds     int           // polled positions taken back by a server crash (positions committed without a flush)
	writesBack  []string      // writes allowed to set the position back (see checkWrites)
	deliveries  map[int64]int // record id -> deliveries
	rank        map[int64]int // record id -> place in the stream's order
	problems    []string
}

func (r *report) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// line is the summary line of the stream.
func (r *report) line(scenario string) string {
	line := fmt.Sprintf("faults: %-44s writes=%d delivered=%d lost=%d redelivered=%d reorders=%d crashes=%d",
		scenario+"/"+r.process, r.writes, r.delivered, r.lost, r.redelivered, r.reorders, r.crashes)
	if r.rewinds > 0 {
		line += fmt.Sprintf(" positions_taken_back=%d", r.rewinds)
	}
	return line
}

// analyze checks one stream: order is every committed row in the stream's order (see orders); log is every
// delivery the receiver recorded, in arrival order (all streams); obs are the polled positions (all
// streams); audit is every committed write of the cursor rows, in commit order (all streams).
func analyze(process string, order []row, log []delivery, obs []posObs, audit []auditRow) *report {
	return analyzeWith(process, false, nil, order, log, obs, audit)
}

// analyzeWith is analyze for a stream whose polled position a crash of the server may take back (its
// positions commit without waiting for their flush, and the crash loses the last of them) when
// takenBack is set: that is counted, not a problem, and the checks go on from where it went back to. The
// records in parked are those of a key the stream parked (see world.parks): their first deliveries may
// come after later records of other keys, and the position may pass them before they are delivered (they
// wait in inorder.parked); every other check holds for them, their key's order among them.
func analyzeWith(process string, takenBack bool, parked map[int64]bool, order []row, log []delivery, obs []posObs,
	audit []auditRow) *report {
	r := &report{process: process, writes: len(order), deliveries: map[int64]int{}, rank: map[int64]int{}}
	for i, row := range order {
		r.rank[row.id] = i
	}
	const never = int(^uint(0) >> 1)
	first := make([]int, len(order)) // arrival index of each row's first delivery
	for i := range first {
		first[i] = never
	}
	lastSeq := map[string]int{}
	maxRank := -1
	total := 0
	for idx, d := range log {
		if d.Process != process {
			continue
		}
		total++
		r.deliveries[d.ID]++
		k, ok := r.rank[d.ID]
		if !ok {
			r.phantoms++
			r.problem("record %d (%s seq %d) was delivered but never committed", d.ID, d.Agg, d.Seq)
			continue
		}
		if r.deliveries[d.ID] > 1 {
			continue
		}
		first[k] = idx
		row := order[k]
		if d.Agg != row.agg || d.Seq != row.seq {
			r.problem("record %d was delivered as %s seq %d but is %s seq %d", d.ID, d.Agg, d.Seq, row.agg, row.seq)
		}
		if prev, ok := lastSeq[row.agg]; ok && row.seq < prev {
			r.reorders++
			r.problem("%s seq %d (record %d) first delivered after seq %d", row.agg, row.seq, row.id, prev)
		}
		lastSeq[row.agg] = max(lastSeq[row.agg], row.seq)
		if parked[row.id] {
			continue
		}
		if k < maxRank {
			r.orderBreaks++
			r.problem("record %d first delivered after record %d, which comes after it in the stream's order",
				row.id, order[maxRank].id)
		}
		maxRank = max(maxRank, k)
	}
	for k, a := range first {
		if a == never {
			r.lost++
			r.problem("record %d (%s seq %d) was never delivered", order[k].id, order[k].agg, order[k].seq)
		} else {
			r.delivered++
		}
	}
	r.redelivered = total - r.phantoms - r.delivered

	// The polled position: never back, never on a row that did not commit, never past a row that had not
	// been delivered when it was read.
	upTo := make([]int, len(order)) // latest first arrival among the rows up to each, parked ones aside
	for k := range first {
		upTo[k] = first[k]
		if parked[order[k].id] {
			upTo[k] = -1 // delivered or not, the lost check has it
		}
		if k > 0 {
			upTo[k] = max(upTo[k], upTo[k-1])
		}
	}
	prev := -1
	for _, o := range obs {
		if o.process != process || o.id == -1 {
			if o.process == process && prev >= 0 {
				r.problem("position went back to the beginning from record %d", order[prev].id)
			}
			continue
		}
		k, ok := r.rank[o.id]
		if !ok {
			r.problem("position on record %d, which never committed", o.id)
			continue
		}
		switch {
		case k < prev && takenBack:
			r.rewinds++
			prev = k
		case k < prev:
			r.problem("position went back from record %d to record %d", order[prev].id, o.id)
		}
		prev = max(prev, k)
		if upTo[k] >= o.sinkLen {
			r.problem("position reached record %d before every record up to it had been delivered", o.id)
		}
	}

	r.checkWrites(order, audit, nil)
	return r
}

// checkWrites checks every committed write of the cursor row and of the checkpoint log (audit, all
// streams; order is every committed row in the stream's order): the position never goes back; one
// owner at a time (the epoch never goes back, and every write is made by the instance the row names as
// owner, so no instance whose lease was taken over wrote). The checkpoint tables' rotation copies entries
// into the rows of processes nobody works at that moment, and an operator's redrive asks the owner for it
// in the row: such a write may be theirs, as long as it moves nothing. A write for which mayGoBack (when not nil) reports true may set the position back, as an
// instance of the version before the checkpoint log does when it takes over from a crashed newer one (it
// reads only the cursor row): it is counted in writesBack, and the checks go on from there.
func (r *report) checkWrites(order []row, audit []auditRow, mayGoBack func(auditRow) bool) {
	process := r.process
	prev := -1
	var epoch int64
	for _, a := range audit {
		if a.process != process {
			continue
		}
		if a.epoch < epoch {
			r.problem("write %d by %s set the owner's epoch back from %d to %d", a.n, a.app, epoch, a.epoch)
		}
		epoch = max(epoch, a.epoch)
		aside := (a.app == store.RotateApplicationName || a.app == operatorApp) && !a.moved
		if want := "inorder:" + process + "@" + a.owner; a.epoch > 0 && a.app != want[:min(len(want), 63)] && !aside {
			r.problem("write %d by %s was made while %s owned the process (epoch %d)", a.n, a.app, a.owner, a.epoch)
		}
		if a.id == -1 {
			if prev >= 0 {
				r.problem("write %d by %s set the position back to the beginning", a.n, a.app)
			}
			continue
		}
		k, ok := r.rank[a.id]
		if !ok {
			r.problem("write %d by %s set the position on record %d, which never committed", a.n, a.app, a.id)
			continue
		}
		switch {
		case k < prev && mayGoBack != nil && mayGoBack(a):
			r.writesBack = append(r.writesBack, fmt.Sprintf("write %d by %s set the position back from record %d to "+
				"record %d", a.n, a.app, order[prev].id, a.id))
			prev = k
		case k < prev:
			r.problem("write %d by %s set the position back from record %d to record %d", a.n, a.app,
				order[prev].id, a.id)
		}
		prev = max(prev, k)
	}
}

// resentCovered returns the deliveries of process in log (every delivery the receiver recorded, all
// streams) that sent a record again although the position already covered it: a polled position (obs,
// the monitor's, all streams) that had reached the record was durable before the delivery arrived. A
// processor that lost its connection starts again from its durable position, so it may send again only
// what lies after the position at the moment of the loss. rank is each record's place in (created_at, id)
// order (report.rank). Not for a stream whose position a crash of the server or an older version's
// takeover may set back (see analyzeWith and checkWrites), which may then send again what it had covered.
func resentCovered(process string, rank map[int64]int, log []delivery, obs []posObs) []string {
	var mine []posObs
	for _, o := range obs {
		if o.process == process {
			mine = append(mine, o)
		}
	}
	var bad []string
	covered, at := -1, int64(-1) // the furthest position polled before the delivery at hand, and its record
	next := 0
	for i, d := range log {
		// A poll's sinkLen is the deliveries recorded once its read had returned: every later one arrived
		// after the position it read was durable.
		for ; next < len(mine) && mine[next].sinkLen <= i; next++ {
			if k, ok := rank[mine[next].id]; ok && k > covered {
				covered, at = k, mine[next].id
			}
		}
		if d.Process != process {
			continue
		}
		if k, ok := rank[d.ID]; ok && k <= covered {
			bad = append(bad, fmt.Sprintf("record %d sent again (delivery %d) after the position had reached record %d",
				d.ID, i, at))
		}
	}
	return bad
}

// verdict checks a stream's report and prints its summary line; extra is how many redeliveries the
// scenario allows beyond its crashes' (see world.allowance).
func (w *world) verdict(st stream, r *report, crashes, extra int) {
	w.t.Helper()
	r.crashes = crashes
	line := r.line(w.name)
	w.t.Log(line)
	if full {
		fmt.Fprintln(os.Stdout, line)
	}
	if len(r.problems) > 0 {
		shown := r.problems
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("... and %d more", len(r.problems)-20))
		}
		w.t.Errorf("%s: %d problems:\n  %s", st.process, len(r.problems), strings.Join(shown, "\n  "))
	}
	if bound := crashes*st.perCrash() + extra; r.redelivered > bound {
		w.t.Errorf("%s: %d redeliveries for %d crashes with --checkpoint %s (at most %d, %d of them allowed by the "+
			"scenario); most redelivered: %s", st.process, r.redelivered, crashes, st.checkpoint, bound, extra,
			mostRedelivered(r))
	}
}

func mostRedelivered(r *report) string {
	type rc struct {
		id int64
		n  int
	}
	var all []rc
	for id, n := range r.deliveries {
		if n > 1 {
			all = append(all, rc{id, n})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].id < all[j].id })
	var b strings.Builder
	for i, x := range all {
		if i == 10 {
			break
		}
		fmt.Fprintf(&b, "%d×%d ", x.id, x.n)
	}
	return b.String()
}

// finish stops the writers, waits for every stream to drain and checks each; crashes counts the faults
// injected per process. It returns the reports by process.
func (w *world) finish(sts []stream, crashes map[string]int) map[string]*report {
	w.t.Helper()
	w.writers.stop()
	orders := w.drain(sts)
	order := orders.byClock
	committed, aborted, stats := w.writers.snapshot()
	w.t.Logf("writers: %+v; %d rows committed, %d inserted and not committed", stats, len(committed), len(aborted))
	inTable := map[int64]bool{}
	for _, r := range order {
		inTable[r.id] = true
		if !committed[r.id] {
			w.t.Errorf("record %d is in the table but the writers did not see it commit", r.id)
		}
	}
	for id := range committed {
		if !inTable[id] {
			w.t.Errorf("record %d committed for the writers but is not in the table", id)
		}
	}
	if bad := w.sink.rejected(); len(bad) > 0 {
		w.t.Errorf("the receiver rejected %d requests, first: %s", len(bad), bad[0])
	}
	log, obs, audit := w.sink.deliveries(), w.mon.observations(), w.audit()
	reports := map[string]*report{}
	for _, st := range sts {
		// A takeover by the version before the checkpoint log (upgrade, which sets mayGoBack) sets the position
		// back once, to what the cursor row holds, as its first write does.
		takeovers := 0
		if w.mayGoBack != nil {
			takeovers = 1
		}
		order := orders.of(st)
		r := analyzeWith(st.process, st.slack > 0 || takeovers > 0, w.parkedRecords(st, order), order, log, obs, nil)
		r.checkWrites(order, audit, w.mayGoBack)
		if r.rewinds > crashes[st.process]+takeovers {
			w.t.Errorf("%s: the position was taken back %d times for %d crashes: only a crash of the server may",
				st.process, r.rewinds, crashes[st.process])
		}
		for id := range aborted {
			if r.deliveries[id] > 0 {
				w.t.Errorf("%s: record %d, rolled back, was delivered", st.process, id)
			}
		}
		extra := 0
		if w.allowance != nil {
			extra = w.allowance(st, log)
		}
		w.verdict(st, r, crashes[st.process], extra)
		if r.lost > 0 {
			w.explainLost(st, r, order)
		}
		reports[st.process] = r
	}
	return reports
}

// explainLost logs, for the first lost rows of a stream, when each was created and (where the cluster
// tracks commit timestamps) committed, and the first committed write of the cursor row that moved the
// position past it.
func (w *world) explainLost(st stream, r *report, order []row) {
	shown := 0
	for _, row := range order {
		if r.deliveries[row.id] > 0 {
			continue
		}
		if shown++; shown > 5 {
			break
		}
		var created, committed, passedAt, passedTo *string
		var passedBy *string
		err := w.pool.QueryRow(context.Background(), `
			SELECT e.created_at::text,
			       CASE WHEN current_setting('track_commit_timestamp') = 'on'
			            THEN (pg_xact_commit_timestamp(e.xmin) - e.created_at)::text END,
			       (w.at - e.created_at)::text, w.app,
			       format('record %s created %s after it', p.id, p.created_at - e.created_at)
			FROM events e
			LEFT JOIN LATERAL (
				SELECT f.* FROM fault_cursor_writes f JOIN events p2 ON p2.id = f.position_id::bigint
				WHERE f.process = $2 AND (p2.created_at, p2.id) > (e.created_at, e.id)
				ORDER BY f.n LIMIT 1) w ON true
			LEFT JOIN events p ON p.id = w.position_id::bigint
			WHERE e.id = $1`, row.id, st.process).Scan(&created, &committed, &passedAt, &passedBy, &passedTo)
		if err != nil {
			w.t.Logf("explain lost record %d: %v", row.id, err)
			continue
		}
		w.t.Logf("%s: lost record %d (%s seq %d) created at %s, committed %s later; the position was moved past it "+
			"%s after its creation by %s, to %s", st.process, row.id, row.agg, row.seq, deref(created),
			deref(committed), deref(passedAt), deref(passedBy), deref(passedTo))
	}
}

func deref(s *string) string {
	if s == nil {
		return "?"
	}
	return *s
}

// parkedRecords returns the records of st that may have waited in inorder.parked (see analyzeWith): those
// of the key the scenario had the receiver refuse, from the first refused on.
func (w *world) parkedRecords(st stream, order []row) map[int64]bool {
	p, ok := w.parks[st.process]
	if !ok {
		return nil
	}
	out := map[int64]bool{}
	from := false
	for _, r := range order {
		from = from || r.id == p.first
		if from && r.agg == p.key {
			out[r.id] = true
		}
	}
	return out
}
