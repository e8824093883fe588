package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// Sizes of the measures run by the benchmarks.
const (
	commitN       = 5000             // single-row commits
	commitLimit   = 20 * time.Second // ... or as many as fit in this
	updateInTxN   = 5000             // updates in one transaction
	keysetRows    = 100_000          // rows of the keyset-read table
	keysetPasses  = 3                // measured reads of the whole table
	noopBatchRows = 100_000          // backlog for the noop processor, checkpoint per batch
	// noopRecordRows is smaller: one durable commit per record makes 100k rows take a minute or more.
	noopRecordRows = 20_000
	pubsubRows     = 5000 // outbox rows published with 100 messages in flight
	// pubsubOneRows is smaller: with one message in flight each publish waits out the client's 10ms
	// bundling delay, so 5000 rows would take a minute.
	pubsubOneRows = 1000

	catchUpRows   = 1_000_000 // backlog of the catch-up, checkpoint per batch
	readCostSmall = 100_000   // rows of the table for the per-batch read cost ...
	readCostLarge = 1_000_000 // ... and of the larger one
	readCostReads = 200       // measured reads at each size

	sleepN = 1000 // time.Sleep(1ms) calls of the handler limit
	// partRowsPer is the backlog per partition of the partitioned runs: at about 900 records/s per stream
	// every run takes a few seconds, however many partitions.
	partRowsPer = 3000
	partKeys    = 1024 // keys the partitioned backlog is spread over (see the notes)

	latencyRate     = 1000 // rows/s inserted by the writer of the latency runs
	latencyDuration = 5 * time.Second
	latencyPoll     = 200 * time.Millisecond // the CLI default poll interval
	sparseRate      = 2                      // rows/s of the sparse stream: one every 500ms
	sparseDuration  = 10 * time.Second
	appWriters      = 8               // concurrent single-row writers of the application
	appDuration     = 3 * time.Second // each run of them
	appRounds       = 3               // runs of each mode, interleaved; the median counts
	idleWindow      = 10 * time.Second

	rssTargetMiB = 64

	webhookLatency  = 20 * time.Millisecond // the receiver's answer time
	webhookKeys     = 50
	webhookRowsOne  = 150  // one request at a time: 50/s at most
	webhookRowsMany = 3000 // 64 in flight over 50 keys: 2,500/s at most
)

// partitionCounts and instanceCounts are the partitioned runs: every count with every number of instances.
var (
	partitionCounts = []int{1, 4, 16}
	instanceCounts  = []int{1, 2}
)

// Units of figures.
const (
	perSecond = "/s"
	millis    = "ms"
	micros    = "µs"
	mebibytes = "MiB"
	// connections are sessions of a server.
	connections = "conns"
)

// figure is one number of the table: n things measured (rows, records, reads; 0 when not a count) and a
// value in unit.
type figure struct {
	n     int
	value float64
	unit  string
}

// ms is f as a duration in milliseconds: a time as it is, a rate as the time of one operation.
func (f figure) ms() (float64, bool) {
	switch f.unit {
	case millis:
		return f.value, true
	case micros:
		return f.value / 1000, true
	case perSecond:
		if f.value > 0 {
			return 1000 / f.value, true
		}
	}
	return 0, false
}

// ratio is f over base: in their unit when they share it, else as times (a rate as the time of one).
func ratio(f, base figure) (float64, bool) {
	if f.unit == base.unit {
		return f.value / base.value, base.value > 0
	}
	a, ok1 := f.ms()
	b, ok2 := base.ms()
	return a / b, ok1 && ok2 && b > 0
}

// target is what a line should meet: its ratio (or its value) at least or at most v.
type target struct {
	ofValue bool // compare the value, not the ratio
	atMost  bool
	v       float64
}

func (t *target) String() string {
	op := "≥"
	if t.atMost {
		op = "≤"
	}
	return op + " " + strconv.FormatFloat(t.v, 'f', -1, 64)
}

func (t *target) met(value, ratio float64) bool {
	x := ratio
	if t.ofValue {
		x = value
	}
	if t.atMost {
		return x <= t.v
	}
	return x >= t.v
}

// A line of the table: a figure and what it is compared with.
type line struct {
	key, label string
	limit      bool   // a limit the others are compared with: ratio 1.00
	ref        string // key of the figure it is a ratio to; "" for none
	refLabel   string
	target     *target
}

// References that are settings or targets rather than measures: never printed as lines.
var fixed = map[string]figure{
	"poll":       {value: float64(latencyPoll / time.Millisecond), unit: millis},
	"rsstarget":  {value: rssTargetMiB, unit: mebibytes},
	"sizetarget": {value: sizeTargetMiB, unit: mebibytes},
}

func partKey(partitions, instances int) string {
	return fmt.Sprintf("part%d_%d", partitions, instances)
}

func partLabel(partitions, instances int) string {
	s := "s"
	if partitions == 1 {
		s = ""
	}
	in := "instance"
	if instances > 1 {
		in = "instances"
	}
	return fmt.Sprintf("inorder 1ms handler, %d partition%s, %d %s", partitions, s, instances, in)
}

func tableLines() []line {
	ls := []line{
		{key: "commit", label: "postgres: single-row UPDATE+COMMIT", limit: true},
		{key: "intx", label: "postgres: UPDATE inside one transaction", ref: "commit", refLabel: "single-row commit"},
		{key: "keyset", label: "postgres: keyset read, 1000-row pages", limit: true},
		{key: "read100k", label: "postgres: one batch read, 100k-row table", limit: true},
		{key: "read1m", label: "postgres: one batch read, 1M-row table", ref: "read100k",
			refLabel: "batch read, 100k rows", target: &target{atMost: true, v: 1.2}},
		{key: "sleep", label: "go: time.Sleep(1ms) loop", limit: true},
		{key: "record", label: "inorder noop, checkpoint record", ref: "commit", refLabel: "single-row commit",
			target: &target{v: 3.0}},
		{key: "record_sync", label: "inorder noop, checkpoint record, --synchronous-commit", ref: "commit",
			refLabel: "single-row commit"},
		{key: "record_traced", label: "inorder noop, checkpoint record, traced (SDK, every row with a traceparent)",
			ref: "record", refLabel: "untraced"},
		{key: "batch", label: "inorder noop, checkpoint batch", ref: "keyset", refLabel: "keyset read",
			target: &target{v: 0.5}},
		{key: "batch_traced", label: "inorder noop, checkpoint batch, traced (SDK, every row with a traceparent)",
			ref: "batch", refLabel: "untraced"},
		{key: "catchup", label: "inorder catch-up 1M, checkpoint batch", ref: "keyset", refLabel: "keyset read",
			target: &target{v: 0.5}},
		{key: "rssgrowth", label: "inorder catch-up 1M: peak RSS growth"},
		{key: "rsspeak", label: "inorder catch-up 1M: peak RSS (VmHWM)", ref: "rsstarget",
			refLabel: "64 MiB", target: &target{ofValue: true, atMost: true, v: rssTargetMiB}},
	}
	for _, in := range instanceCounts {
		for _, p := range partitionCounts {
			l := line{key: partKey(p, in), label: partLabel(p, in), ref: partKey(1, 1), refLabel: "1 partition, 1 instance"}
			switch {
			case p == 1 && in == 1:
				l.ref, l.refLabel = "sleep", "time.Sleep(1ms) loop"
			case p == 4 && in == 1:
				l.target = &target{v: 2.5}
			}
			ls = append(ls, l)
		}
	}
	ls = append(ls,
		line{key: "lat_poll_p50", label: "inorder latency, polling 200ms: p50", ref: "poll", refLabel: "poll interval"},
		line{key: "lat_poll_p99", label: "inorder latency, polling 200ms: p99", ref: "poll", refLabel: "poll interval"},
		line{key: "lat_default_p50", label: "inorder latency, default flags: p50", ref: "poll", refLabel: "poll interval",
			target: &target{ofValue: true, atMost: true, v: 5}},
		line{key: "lat_default_p99", label: "inorder latency, default flags: p99", ref: "poll", refLabel: "poll interval",
			target: &target{ofValue: true, atMost: true, v: 25}},
		line{key: "lat_sparse_p50", label: "inorder latency, sparse (every 500ms): p50", ref: "poll", refLabel: "poll interval",
			target: &target{ofValue: true, atMost: true, v: 25}},
		line{key: "lat_sparse_p99", label: "inorder latency, sparse (every 500ms): p99", ref: "poll", refLabel: "poll interval"},
		line{key: "lat_sparse_poll_p50", label: "inorder latency, sparse, polling 200ms: p50", ref: "poll", refLabel: "poll interval"},
		line{key: "lat_sparse_poll_p99", label: "inorder latency, sparse, polling 200ms: p99", ref: "poll", refLabel: "poll interval"},
		line{key: "pg_notify_p50", label: "postgres: commit to NOTIFY receipt: p50", limit: true},
		line{key: "pg_notify_p99", label: "postgres: commit to NOTIFY receipt: p99", limit: true},
		line{key: "lat_notify_p50", label: "inorder latency, NOTIFY: p50", ref: "commit", refLabel: "single-row commit",
			target: &target{ofValue: true, atMost: true, v: 3}},
		line{key: "lat_notify_p99", label: "inorder latency, NOTIFY: p99", ref: "commit", refLabel: "single-row commit"},
		line{key: "app_none", label: "application inserts, 8 writers, no inorder", limit: true},
		line{key: "app_poll", label: "application inserts, inorder polling 200ms", ref: "app_none", refLabel: "no inorder"},
		line{key: "app_default", label: "application inserts, inorder default", ref: "app_none", refLabel: "no inorder",
			target: &target{v: 0.9}},
		line{key: "app_notify", label: "application inserts, NOTIFY trigger + --listen", ref: "app_none", refLabel: "no inorder"},
		line{key: "idle1", label: "idle: transactions/s of 1 quiet process"},
		line{key: "idle50", label: "idle: transactions/s of 50 quiet processes", ref: "idle1", refLabel: "1 process"},
		line{key: "http_ideal1", label: "http: 1 client, receiver answering in 20ms", limit: true},
		line{key: "http_ideal50", label: "http: 50 clients (one per key), 20ms", limit: true},
		line{key: "webhook1", label: "inorder webhook 20ms, 50 keys, in flight 1", ref: "http_ideal1", refLabel: "1 client"},
		line{key: "webhook64", label: "inorder webhook 20ms, 50 keys, in flight 64", ref: "http_ideal50",
			refLabel: "50 clients", target: &target{v: 0.9}},
		line{key: "webhook64_1key", label: "inorder webhook 20ms, 1 key, in flight 64", ref: "http_ideal1",
			refLabel: "1 client"},
		line{key: "park_none", label: "webhook 20ms, 50 keys, in flight 64, --on-halt park: 49 keys, none refused",
			ref: "http_ideal50", refLabel: "50 clients"},
		line{key: "park_one", label: "the same with 1 key refused and parked: the other 49 keys", ref: "park_none",
			refLabel: "none refused", target: &target{v: 0.9}},
		line{key: "rm_insert_select", label: "postgres: the read model's rows by one INSERT ... SELECT", limit: true},
		line{key: "rm_batched", label: "inorder read model, an upsert each, a batch handler", ref: "rm_insert_select",
			refLabel: "INSERT ... SELECT", target: &target{v: 0.5}},
		line{key: "rm_one", label: "inorder read model, an upsert each, one record at a time", ref: "rm_insert_select",
			refLabel: "INSERT ... SELECT"},
		line{key: "pubsub1", label: "pubsub to pstest, max in flight 1", ref: "batch", refLabel: "noop batch"},
		line{key: "pubsub100", label: "pubsub to pstest, max in flight 100", ref: "batch", refLabel: "noop batch"},
	)
	ls = append(ls, kafkaLines()...)
	ls = append(ls, natsLines()...)
	ls = append(ls, rabbitmqLines()...)
	ls = append(ls, redisLines()...)
	ls = append(ls, fleetLines()...)
	ls = append(ls, idleFleetLines()...)
	ls = append(ls, networkLines()...)
	ls = append(ls, bigLines()...)
	ls = append(ls, clockLines()...)
	ls = append(ls, filterLines()...)
	ls = append(ls, pgqLines()...)
	return append(ls, snapshotLines()...)
}

// notes are details of the runs that the footnotes give.
type notes struct {
	partBound   map[int]float64  // partitions -> speedup the key spread allows: rows / rows of the largest
	latency     map[bool]latency // listen -> the run
	hwmBefore   float64          // VmHWM of the process before the catch-up, MiB
	rssBefore   float64          // VmRSS at the start of the catch-up, MiB
	hwmReset    bool             // VmHWM was reset at the start of the catch-up (clear_refs)
	hwmSampled  float64          // the highest VmRSS sampled every 50ms during the catch-up, MiB
	readCostPos map[int]string
}

var (
	figuresMu sync.Mutex
	figures   = map[string]figure{}
	runNotes  = notes{partBound: map[int]float64{}, latency: map[bool]latency{}, readCostPos: map[int]string{}}
)

// record notes a rate.
func record(b *testing.B, key string, r result) {
	b.ReportMetric(0, "ns/op") // the whole call, setup included: not a figure
	b.ReportMetric(r.rate(), "records/s")
	b.ReportMetric(float64(r.n), "records")
	b.ReportMetric(float64(r.resent), "resent") // records sent again after the sink had accepted them
	keep(key, figure{n: r.n, value: r.rate(), unit: perSecond})
}

// recordFigure notes a figure that is not a rate.
func recordFigure(b *testing.B, key string, f figure) {
	b.ReportMetric(0, "ns/op")
	unit := strings.ReplaceAll(f.unit, "µ", "u")
	b.ReportMetric(f.value, key+"_"+unit)
	keep(key, f)
}

func keep(key string, f figure) {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	figures[key] = f
}

func TestMain(m *testing.M) {
	start := time.Now()
	code := m.Run()
	figuresMu.Lock()
	if len(figures) > 0 {
		printTable(os.Stdout, time.Since(start))
	}
	figuresMu.Unlock()
	// What pgtest.Main does after m.Run.
	if c := pgtest.Cluster(); c != nil {
		_ = c.Stop()
	}
	os.Exit(code)
}

func printTable(w io.Writer, total time.Duration) {
	fmt.Fprintf(w, "\ninorder bench\nmachine:  %s\n", machine())
	fmt.Fprintf(w, "postgres: PostgreSQL %s, fsync %s, synchronous_commit %s, a throwaway cluster on the same machine, "+
		"over loopback\n\n", serverInfo.version, serverInfo.fsync, serverInfo.syncCommit)
	const row = "%-44s %9s %14s %8s   %s\n"
	fmt.Fprintf(w, row, "measure", "n", "value", "ratio", "reference")
	var missed []string
	for _, l := range tableLines() {
		f, ok := figures[l.key]
		if !ok {
			continue
		}
		r, ratioText, ref := math.NaN(), "-", "-"
		switch {
		case l.limit:
			ratioText = "1.00"
		case l.ref != "":
			ref, ratioText = l.refLabel, "n/a"
			base, ok := figures[l.ref]
			if !ok {
				base, ok = fixed[l.ref]
			}
			if ok {
				if v, ok := ratio(f, base); ok {
					r, ratioText = v, formatRatio(v)
				}
			}
		}
		if l.target != nil {
			verdict := "met"
			switch {
			case !l.target.ofValue && math.IsNaN(r):
				verdict = "not judged: no reference"
			case !l.target.met(f.value, r):
				verdict = "MISSED"
				missed = append(missed, l.label)
			}
			what := "ratio"
			if l.target.ofValue {
				what = "value"
			}
			ref += fmt.Sprintf(" (target: %s %s%s, %s)", what, l.target, targetUnit(l, f), verdict)
		}
		n := "-"
		if f.n > 0 {
			n = thousands(float64(f.n))
		}
		fmt.Fprintf(w, row, l.label, n, formatValue(f), ratioText, ref)
	}
	printNotes(w)
	if len(missed) > 0 {
		fmt.Fprintf(w, "targets missed: %s.\n", strings.Join(missed, "; "))
	}
	fmt.Fprintf(w, "%s in all.\n", total.Round(time.Second))
}

func targetUnit(l line, f figure) string {
	if l.target.ofValue {
		return " " + f.unit
	}
	return ""
}

func printNotes(w io.Writer) {
	note := func(format string, args ...any) { wrap(w, fmt.Sprintf(format, args...), noteWidth) }
	fmt.Fprintln(w)
	note("n: rows, records, messages or reads measured. ratio: the figure over its reference; a latency over a " +
		"rate as times (a rate's time is that of one operation: a single-row commit takes 1/rate).")
	note("postgres: the keyset read makes %d passes over a %s-row table. one batch read: the processor's query "+
		"(WHERE (created_at, id) > ($1, $2) AND created_at < $3 ORDER BY created_at, id LIMIT 1000) from the "+
		"middle of the table, scanned into Go values: the median of %d reads after 10 unmeasured, the reads of "+
		"the two tables taking turns.", keysetPasses, thousands(keysetRows), readCostReads)
	note("inorder noop and catch-up: BatchSize 1000, PollInterval 5ms, a fresh database each, timed from Run "+
		"until the process's position (inorder.position) is the last row. checkpoint record drains %s rows, "+
		"not %s: one durable commit per record.", thousands(noopRecordRows), thousands(noopBatchRows))
	if _, ok := figures["rsspeak"]; ok {
		how := "the highest VmRSS sampled every 50ms (VmHWM could not be reset)"
		if runNotes.hwmReset {
			how = "VmHWM, reset at the start of the catch-up through /proc/self/clear_refs"
		}
		note("catch-up RSS: of the whole test process (Go runtime, pgx, the test's pools, the cluster client): "+
			"%s; growth over VmRSS at the start (%.1f MiB, after a GC that returned free memory). The highest "+
			"VmRSS sampled every 50ms was %.1f MiB; the process's VmHWM before the catch-up %.1f MiB.",
			how, runNotes.rssBefore, runNotes.hwmSampled, runNotes.hwmBefore)
	}
	if len(runNotes.partBound) > 0 {
		var bounds []string
		for _, p := range partitionCounts {
			if b, ok := runNotes.partBound[p]; ok && p > 1 {
				bounds = append(bounds, fmt.Sprintf("%.2fx over %d", b, p))
			}
		}
		note("partitions: a handler sleeping 1ms per record, %s rows per partition over %d keys, BatchSize 100, "+
			"PollInterval 200ms, checkpoint batch; instances are runners in this process, each with its own "+
			"instance name, a slot for every partition. Timed from Run until every partition's position holds its "+
			"last row. Keys hash to partitions unevenly and the largest partition bounds the run: the speedup the "+
			"spread allows is %s partitions. (With 64 keys, k0 to k63, the largest of 4 partitions gets 24 of "+
			"them, which alone caps 4 partitions at 2.67x.)",
			thousands(partRowsPer), partKeys, strings.Join(bounds, ", "))
	}
	if len(runNotes.latency) > 0 {
		poll, notify := runNotes.latency[false], runNotes.latency[true]
		note("latency: one writer inserting single rows (autocommit), one due every %s for %s (%s and %s rows/s "+
			"achieved, polling and NOTIFY); each row's time from the writer's COMMIT returning to the handler "+
			"being called, negative clamped to 0; checkpoint record, BatchSize 100. NOTIFY: the insert trigger "+
			"and Listen, PollInterval 200ms as fallback. commit to NOTIFY receipt: the same run, a second listener "+
			"of the test's own, the k-th notification against the k-th commit (0 when it comes before the writer "+
			"has read its COMMIT's reply).",
			time.Second/latencyRate, latencyDuration, thousands(poll.writeRate), thousands(notify.writeRate))
		note("Split at the read that brought the row (p50/p99): polling %s/%s ms from commit to read, %s/%s ms "+
			"from read to handler; NOTIFY %s/%s and %s/%s ms. The processor's checkpoints (handler return to "+
			"position committed) took %s/%s ms polling, %s/%s ms NOTIFY. WAL flushes per row written "+
			"(pg_stat_wal, writer and processor): %s polling, %s NOTIFY. The machine's CPUs were %.0f%% and "+
			"%.0f%% busy meanwhile (every process on it), the test process using %.2f and %.2f CPUs. Polling: "+
			"%d of the %d reads that followed an idle poll interval brought nothing.",
			msText(poll.readP50), msText(poll.readP99), msText(poll.batchP50), msText(poll.batchP99),
			msText(notify.readP50), msText(notify.readP99), msText(notify.batchP50), msText(notify.batchP99),
			msText(poll.cpP50), msText(poll.cpP99), msText(notify.cpP50), msText(notify.cpP99),
			perRow(poll.walSyncs), perRow(notify.walSyncs), 100*poll.cpuMachine, 100*notify.cpuMachine,
			poll.cpuSelf, notify.cpuSelf, poll.idleEmpty, poll.idleReads)
	}
	note("latency: one writer inserting single rows at %d/s (sparse: %d/s) for %s, checkpoint record; polling "+
		"200ms is the previous default (no probe), default flags probe for new rows (2ms after records, doubling to "+
		"25ms), NOTIFY listens without the probe. application inserts: pgbench, %d clients inserting single rows "+
		"(autocommit) for %s into the events table while a noop processor delivers every row as it commits, in "+
		"%d interleaved rounds of the four modes, the median of each; fsync and synchronous_commit on. idle: transactions committed and rolled back in the "+
		"processes' database (pg_stat_database) over %s, after %s with nothing to read.",
		latencyRate, sparseRate, latencyDuration, appWriters, appDuration, appRounds, idleWindow, probeQuietFor+2*time.Second)
	note("webhook: the signed webhook handler to an in-process receiver that answers 200 after 20ms, "+
		"checkpoint record (one commit per advance of the prefix), %s rows over %d keys (%s with one in flight "+
		"or one key); the references are plain HTTP clients to the same receiver, one per key, each sending its "+
		"share one request after another: what a keyed stream could reach without inorder (keys/latency at "+
		"most).", thousands(webhookRowsMany), webhookKeys, thousands(webhookRowsOne))
	note("parking: the same webhook stream with --on-halt park, the receiver refusing (400, after its 20ms) "+
		"every record of one key in one run and none in the other; the figure is the other %d keys' records "+
		"over the time until the position reaches the last row (the refused key's first record refused once, "+
		"the rest parked without a request).", webhookKeys-1)
	note("pubsub: checkpoint batch, 10 ordering keys, the client's default publish settings (a 10ms bundling "+
		"delay, which bounds max in flight 1 to about 100/s; hence %s rows there).", thousands(pubsubOneRows))
	kafkaNote(note)
	natsNote(note)
	rabbitmqNote(note)
	redisNote(note)
	fleetNote(note)
	networkNote(note)
	bigNoteText(note)
	pgqNote(note)
	snapshotNote(note)
}

// noteWidth is the width the notes under the table are wrapped to.
const noteWidth = 104

// wrap writes text in lines of at most width characters, broken at spaces.
func wrap(w io.Writer, text string, width int) {
	line := 0
	for i, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case line+1+n > width:
			fmt.Fprintln(w)
			line = 0
		default:
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += n
	}
	fmt.Fprintln(w)
}

// formatValue shows a figure with its unit: rates as integers, times and sizes with a decimal or two.
func formatValue(f figure) string {
	switch f.unit {
	case perSecond:
		if f.value < 10 { // a drain that did not finish: 0.42 /s, not 0
			return fmt.Sprintf("%.2f /s", f.value)
		}
		return thousands(f.value) + " /s"
	case connections, reads:
		return thousands(f.value) + " " + f.unit
	case millis, micros:
		if f.value < 10 {
			return fmt.Sprintf("%.2f %s", f.value, f.unit)
		}
		return fmt.Sprintf("%s %s", thousandsFrac(f.value, 1), f.unit)
	default:
		return fmt.Sprintf("%.1f %s", f.value, f.unit)
	}
}

// formatRatio shows two decimals, or two significant digits below 0.1.
func formatRatio(v float64) string {
	if v >= 0.095 {
		return fmt.Sprintf("%.2f", v)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// thousands formats v rounded to an integer with comma separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// thousandsFrac formats v with decimals digits after the point and comma separators before it.
func thousandsFrac(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	whole, frac, _ := strings.Cut(s, ".")
	n, _ := strconv.ParseFloat(whole, 64)
	return thousands(n) + "." + frac
}

// The benchmarks run once each (make bench passes -benchtime 1x); b.N is ignored. Go runs them in this
// order, which puts each inorder measure right after the limit it is compared with, so that the drift of
// a shared machine between the two stays small. The table has its own order. The catch-up runs before
// the partitioned runs and Pub/Sub, so that its peak RSS is not inherited from them.

func BenchmarkPostgresCommit(b *testing.B) {
	record(b, "commit", measureCommit(b, commitN, commitLimit))
}

func BenchmarkPostgresUpdateInTx(b *testing.B) {
	record(b, "intx", measureUpdateInTx(b, updateInTxN))
}

func BenchmarkNoopRecord(b *testing.B) {
	record(b, "record", measureNoop(b, processor.CheckpointRecord, noopRecordRows))
	record(b, "record_sync", measureNoopWith(b, processor.CheckpointRecord, noopRecordRows, true, nil))
	record(b, "record_traced", measureNoopWith(b, processor.CheckpointRecord, noopRecordRows, false, tracedProvider(b)))
}

func BenchmarkPostgresKeysetRead(b *testing.B) {
	record(b, "keyset", measureKeyset(b, keysetRows, keysetPasses))
}

func BenchmarkNoopBatch(b *testing.B) {
	record(b, "batch", measureNoop(b, processor.CheckpointBatch, noopBatchRows))
	record(b, "batch_traced", measureNoopWith(b, processor.CheckpointBatch, noopBatchRows, false, tracedProvider(b)))
}

func BenchmarkCatchUp(b *testing.B) {
	c := measureCatchUp(b, catchUpRows)
	record(b, "catchup", c.result)
	recordFigure(b, "rssgrowth", figure{value: c.peak - c.rssBefore, unit: mebibytes})
	recordFigure(b, "rsspeak", figure{value: c.peak, unit: mebibytes})
	figuresMu.Lock()
	defer figuresMu.Unlock()
	runNotes.hwmBefore, runNotes.rssBefore, runNotes.hwmReset, runNotes.hwmSampled = c.hwmBefore, c.rssBefore, c.reset, c.sampled
}

func BenchmarkReadCost(b *testing.B) {
	figs := measureReadCost(b, []int{readCostSmall, readCostLarge}, readCostReads)
	recordFigure(b, "read100k", figs[0])
	recordFigure(b, "read1m", figs[1])
}

func BenchmarkSleepLoop(b *testing.B) {
	record(b, "sleep", measureSleep(sleepN))
}

func BenchmarkPartitions(b *testing.B) {
	for _, in := range instanceCounts {
		for _, p := range partitionCounts {
			b.Run(fmt.Sprintf("partitions=%d/instances=%d", p, in), func(b *testing.B) {
				r, bound := measurePartitions(b, p, in, p*partRowsPer, partKeys)
				record(b, partKey(p, in), r)
				figuresMu.Lock()
				defer figuresMu.Unlock()
				runNotes.partBound[p] = bound
			})
		}
	}
}

func BenchmarkLatency(b *testing.B) {
	for _, name := range []string{"poll", "default", "sparse", "sparse_poll", "notify"} {
		listen := name == "notify"
		b.Run(name, func(b *testing.B) {
			rate, d := latencyRate, latencyDuration
			if name == "sparse" || name == "sparse_poll" {
				rate, d = sparseRate, sparseDuration
			}
			l := measureLatency(b, name, rate, d)
			recordFigure(b, "lat_"+name+"_p50", figure{n: l.rows, value: ms(l.p50), unit: millis})
			recordFigure(b, "lat_"+name+"_p99", figure{n: l.rows, value: ms(l.p99), unit: millis})
			if listen {
				recordFigure(b, "pg_notify_p50", figure{n: l.pgRows, value: ms(l.pgP50), unit: millis})
				recordFigure(b, "pg_notify_p99", figure{n: l.pgRows, value: ms(l.pgP99), unit: millis})
			}
			figuresMu.Lock()
			defer figuresMu.Unlock()
			if name == "poll" || name == "notify" {
				runNotes.latency[listen] = l
			}
		})
	}
}

func BenchmarkWebhookWindow(b *testing.B) {
	b.Run("ideal1", func(b *testing.B) {
		record(b, "http_ideal1", measureHTTPIdeal(b, 1, webhookRowsOne, webhookLatency))
	})
	b.Run("ideal50", func(b *testing.B) {
		record(b, "http_ideal50", measureHTTPIdeal(b, webhookKeys, webhookRowsMany, webhookLatency))
	})
	b.Run("inflight1", func(b *testing.B) {
		record(b, "webhook1", measureWebhook(b, 1, webhookKeys, webhookRowsOne, webhookLatency))
	})
	b.Run("inflight64", func(b *testing.B) {
		record(b, "webhook64", measureWebhook(b, 64, webhookKeys, webhookRowsMany, webhookLatency))
	})
	b.Run("inflight64_1key", func(b *testing.B) {
		record(b, "webhook64_1key", measureWebhook(b, 64, 1, webhookRowsOne, webhookLatency))
	})
	// Parking: the other 49 keys' rate with one key refused and parked, beside the same with none refused.
	b.Run("park_none", func(b *testing.B) {
		record(b, "park_none", measureWebhookParking(b, false, 64, webhookKeys, webhookRowsMany, webhookLatency))
	})
	b.Run("park_one", func(b *testing.B) {
		record(b, "park_one", measureWebhookParking(b, true, 64, webhookKeys, webhookRowsMany, webhookLatency))
	})
}

func BenchmarkApplicationWrites(b *testing.B) {
	// The modes take turns, in a rotating order, so that the machine's drift over the run (other tenants,
	// the disk) falls on all of them alike; the median of each mode's runs counts.
	modes := []string{"none", "poll", "default", "notify"}
	runs := map[string][]result{}
	for round := range appRounds {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			runs[mode] = append(runs[mode], measureAppWrites(b, mode, appWriters, appDuration))
		}
	}
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) { record(b, "app_"+mode, median(runs[mode])) })
	}
}

// median returns the run with the median rate.
func median(rs []result) result {
	sorted := slices.SortedFunc(slices.Values(rs), func(a, b result) int { return cmp.Compare(a.rate(), b.rate()) })
	return sorted[len(sorted)/2]
}

func BenchmarkIdle(b *testing.B) {
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("processes=%d", n), func(b *testing.B) {
			recordFigure(b, fmt.Sprintf("idle%d", n), measureIdle(b, n, probeQuietFor+2*time.Second, idleWindow))
		})
	}
}

func BenchmarkPubsubInFlight100(b *testing.B) {
	record(b, "pubsub100", measurePubsub(b, 100, pubsubRows))
}

func BenchmarkPubsubInFlight1(b *testing.B) {
	record(b, "pubsub1", measurePubsub(b, 1, pubsubOneRows))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perRow(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func msText(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 1, 64) }

// TestMeasures runs every measure on a few rows, so that the benchmarks keep working. It records no
// figures. The measures run as parallel subtests: most of their time is waiting (windows, poll intervals,
// holds), and one after another they took most of the package's ten-minute timeout under -count=3 on a
// busy machine.
func TestMeasures(t *testing.T) {
	t.Parallel()
	for name, measure := range map[string]func(*testing.T) result{
		"commit":  func(t *testing.T) result { return measureCommit(t, 20, time.Minute) },
		"intx":    func(t *testing.T) result { return measureUpdateInTx(t, 20) },
		"keyset":  func(t *testing.T) result { return measureKeyset(t, 2500, 1) },
		"record":  func(t *testing.T) result { return measureNoop(t, processor.CheckpointRecord, 300) },
		"batch":   func(t *testing.T) result { return measureNoop(t, processor.CheckpointBatch, 2500) },
		"sleep":   func(*testing.T) result { return measureSleep(5) },
		"pubsub1": func(t *testing.T) result { return measurePubsub(t, 1, 20) },
		"catchup": func(t *testing.T) result {
			c := measureCatchUp(t, 2500)
			if c.peak <= 0 {
				t.Errorf("catch-up: no peak RSS")
			}
			return c.result
		},
		"partitioned": func(t *testing.T) result {
			r, _ := measurePartitions(t, 2, 2, 40, partKeys)
			return r
		},
		"pubsub100":  func(t *testing.T) result { return measurePubsub(t, 100, 300) },
		"webhook64":  func(t *testing.T) result { return measureWebhook(t, 64, 10, 200, time.Millisecond) },
		"park_one":   func(t *testing.T) result { return measureWebhookParking(t, true, 64, 10, 200, time.Millisecond) },
		"rm_batched": func(t *testing.T) result { return measureReadModel(t, 2500, true) },
		"rm_one":     func(t *testing.T) result { return measureReadModel(t, 300, false) },
		"rm_insert":  func(t *testing.T) result { return measureInsertSelect(t, 2500) },
		"httpideal":  func(t *testing.T) result { return measureHTTPIdeal(t, 10, 200, time.Millisecond) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := measure(t)
			if r.n == 0 || r.rate() <= 0 {
				t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
			}
			if r.resent != 0 {
				t.Errorf("%s: %d records sent again after the sink had accepted them", name, r.resent)
			}
		})
	}
	for name, check := range map[string]func(*testing.T){
		"readcost": func(t *testing.T) {
			if f := measureReadCost(t, []int{2000, 3000}, 5); f[0].n != 5 || f[0].value <= 0 || f[1].value <= 0 {
				t.Errorf("read cost: %+v", f)
			}
		},
		"latency_notify": func(t *testing.T) {
			if l := measureLatency(t, "notify", 100, 300*time.Millisecond); l.rows == 0 || l.p99 < l.p50 || l.pgRows == 0 {
				t.Errorf("latency: %+v", l)
			}
		},
		"latency_default": func(t *testing.T) {
			if l := measureLatency(t, "default", 100, 300*time.Millisecond); l.rows == 0 || l.p99 < l.p50 {
				t.Errorf("latency: %+v", l)
			}
		},
		"appwrites": func(t *testing.T) {
			if r := measureAppWrites(t, "default", 2, 300*time.Millisecond); r.n == 0 {
				t.Errorf("application writes: %+v", r)
			}
		},
		"idle": func(t *testing.T) {
			if f := measureIdle(t, 2, 300*time.Millisecond, time.Second); f.value < 0 {
				t.Errorf("idle: %+v", f)
			}
		},
		"network":  testNetworkMeasures,
		"snapshot": testSnapshotMeasures,
		"clock":    testClockMeasures,
		"filter":   testFilterMeasures,
		"pgq":      testPgQMeasures,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t)
		})
	}
}
