package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/internal/pgtest"
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
)

// A line of the table: a figure and what it is compared with.
type line struct {
	key, label string
	ref        string // key of the line it is a ratio to; "" for a reference
	refLabel   string
}

var lines = []line{
	{key: "commit", label: "postgres: single-row UPDATE+COMMIT"},
	{key: "intx", label: "postgres: UPDATE inside one transaction", ref: "commit", refLabel: "single-row commit"},
	{key: "keyset", label: "postgres: keyset read, 1000-row pages"},
	{key: "record", label: "inorder noop, checkpoint record", ref: "commit", refLabel: "single-row commit"},
	{key: "batch", label: "inorder noop, checkpoint batch", ref: "keyset", refLabel: "keyset read"},
	{key: "pubsub1", label: "pubsub to pstest, max in flight 1", ref: "batch", refLabel: "noop batch"},
	{key: "pubsub100", label: "pubsub to pstest, max in flight 100", ref: "batch", refLabel: "noop batch"},
}

var (
	figuresMu sync.Mutex
	figures   = map[string]result{}
)

func record(b *testing.B, key string, r result) {
	b.ReportMetric(0, "ns/op") // the whole call, setup included: not a figure
	b.ReportMetric(r.rate(), "records/s")
	b.ReportMetric(float64(r.n), "records")
	figuresMu.Lock()
	defer figuresMu.Unlock()
	figures[key] = r
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
	fsync := "fsync " + serverInfo.fsync
	if serverInfo.syncCommit != "on" {
		fsync += ", synchronous_commit " + serverInfo.syncCommit
	}
	fmt.Fprintf(w, "\ninorder bench (PostgreSQL %s, %s, loopback; %s/%s, %d CPUs)\n",
		serverInfo.version, fsync, runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(w, "%-41s %8s %11s %8s   %s\n", "measure", "n", "rate (/s)", "ratio", "reference")
	for _, l := range lines {
		r, ok := figures[l.key]
		if !ok {
			continue
		}
		ratio, ref := "1.00", "-"
		if l.ref != "" {
			ref = l.refLabel
			ratio = "n/a"
			if base, ok := figures[l.ref]; ok && base.rate() > 0 {
				ratio = formatRatio(r.rate() / base.rate())
			}
		}
		fmt.Fprintf(w, "%-41s %8s %11s %8s   %s\n", l.label, thousands(float64(r.n)), thousands(r.rate()), ratio, ref)
	}
	fmt.Fprintf(w, "n: rows, records or messages measured; the keyset read makes %d passes over a %s-row table.\n"+
		"inorder: BatchSize 1000, PollInterval 5ms, a fresh database each, timed from Run until the cursor row\n"+
		"holds the last row. checkpoint record drains %s rows, not %s: one durable commit per record.\n"+
		"pubsub: checkpoint batch, 10 ordering keys, the client's default publish settings (a 10ms bundling\n"+
		"delay, which bounds max in flight 1 to about 100/s; hence %s rows there). %s in all.\n",
		keysetPasses, thousands(keysetRows), thousands(noopRecordRows), thousands(noopBatchRows),
		thousands(pubsubOneRows), total.Round(time.Second))
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

// The benchmarks run once each (make bench passes -benchtime 1x); b.N is ignored. Go runs them in this
// order, which puts each inorder measure right after the limit it is compared with, so that the drift of
// a shared machine between the two stays small. The table has its own order.

func BenchmarkPostgresCommit(b *testing.B) {
	record(b, "commit", measureCommit(b, commitN, commitLimit))
}

func BenchmarkPostgresUpdateInTx(b *testing.B) {
	record(b, "intx", measureUpdateInTx(b, updateInTxN))
}

func BenchmarkNoopRecord(b *testing.B) {
	record(b, "record", measureNoop(b, processor.CheckpointRecord, noopRecordRows))
}

func BenchmarkPostgresKeysetRead(b *testing.B) {
	record(b, "keyset", measureKeyset(b, keysetRows, keysetPasses))
}

func BenchmarkNoopBatch(b *testing.B) {
	record(b, "batch", measureNoop(b, processor.CheckpointBatch, noopBatchRows))
}

func BenchmarkPubsubInFlight100(b *testing.B) {
	record(b, "pubsub100", measurePubsub(b, 100, pubsubRows))
}

func BenchmarkPubsubInFlight1(b *testing.B) {
	record(b, "pubsub1", measurePubsub(b, 1, pubsubOneRows))
}

// TestMeasures runs every measure on a few rows, so that the benchmarks keep working. It records no
// figures.
func TestMeasures(t *testing.T) {
	for name, r := range map[string]result{
		"commit":    measureCommit(t, 20, time.Minute),
		"intx":      measureUpdateInTx(t, 20),
		"keyset":    measureKeyset(t, 2500, 1),
		"record":    measureNoop(t, processor.CheckpointRecord, 300),
		"batch":     measureNoop(t, processor.CheckpointBatch, 2500),
		"pubsub1":   measurePubsub(t, 1, 20),
		"pubsub100": measurePubsub(t, 100, 300),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
}
