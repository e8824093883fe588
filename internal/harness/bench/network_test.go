package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/stdout"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/processor"
)

// Settings and sizes of the network measures: everything through one proxy that adds netDelay to each
// direction, a round trip of a client and a server in one cloud region.
const (
	netDelay       = 500 * time.Microsecond
	netCommitN     = 2000             // single-row commits, synchronous and not
	netCommitLimit = 15 * time.Second // ... or as many as fit in this
	// netBatchRows is the backlog of the processor with a checkpoint per batch: the keyset table's size,
	// so that the start-up (a connection and its set-up, some fifty round trips) weighs little.
	netBatchRows  = 100_000
	netRecordRows = 2000 // ... and with a checkpoint per record
	netPings      = 200  // SELECT 1 round trips timed, through the proxy and around it
)

// netRun is what the notes say of a noop run through the proxy.
type netRun struct {
	rows, batches int
	exchanges     int64
	startup       time.Duration
}

// netNotes are the details of the network runs that the notes give. figuresMu guards them.
var netNotes struct {
	pingProxy, pingDirect time.Duration // median SELECT 1 round trip
	runs                  map[processor.Checkpoint]netRun
}

// networkLines are the lines of the measures through the proxy.
func networkLines() []line {
	return []line{
		{key: "net_keyset", label: "1ms RTT: postgres keyset read, 1000 rows", limit: true},
		{key: "net_commit", label: "1ms RTT: postgres single-row UPDATE+COMMIT", limit: true},
		{key: "net_async", label: "1ms RTT: postgres single-row commit, async", limit: true},
		{key: "net_batch", label: "1ms RTT: inorder stdout, checkpoint batch", ref: "net_keyset",
			refLabel: "keyset read, 1ms RTT", target: &target{v: 0.5}},
		{key: "net_record", label: "1ms RTT: inorder stdout, checkpoint record", ref: "net_async",
			refLabel: "async commit, 1ms RTT", target: &target{v: 0.9}},
		{key: "net_webhook_direct", label: "loopback: inorder webhook 20ms, in flight 64", limit: true},
		{key: "net_webhook", label: "1ms RTT: inorder webhook 20ms, in flight 64", ref: "net_webhook_direct",
			refLabel: "the same on loopback", target: &target{v: 0.95}},
	}
}

// networkNote is the footnote on the network lines, given when they were measured.
func networkNote(note func(format string, args ...any)) {
	measured := false
	for _, l := range networkLines() {
		_, ok := figures[l.key]
		measured = measured || ok
	}
	if !measured {
		return
	}
	note("network (1ms RTT): the connections go through one TCP proxy on loopback (internal/harness/tcpproxy) that "+
		"writes every chunk it reads on %s later, each way; a SELECT 1 takes %s ms through it, %s ms around "+
		"it (medians of %d). The keyset read and the commits are those of the loopback lines, through it; the "+
		"async commit runs on a session with synchronous_commit off: one round trip each, no wait on the "+
		"disk. inorder stdout: the stdout handler writing JSON lines to a file, BatchSize left at its default, "+
		"PollInterval 5ms, the processor's connections through the proxy; %s rows with checkpoint batch, %s "+
		"with checkpoint record. The webhook: the in-flight-64 run of the webhook lines (%s rows over %d keys) "+
		"twice in this benchmark, the processor's connections around the proxy and through it; the requests to "+
		"the receiver never go through it.", netDelay, msHundredths(netNotes.pingProxy), msHundredths(netNotes.pingDirect),
		netPings, thousands(netBatchRows), thousands(netRecordRows), thousands(webhookRowsMany), webhookKeys)
	var parts []string
	for _, c := range []processor.Checkpoint{processor.CheckpointBatch, processor.CheckpointRecord} {
		r, ok := netNotes.runs[c]
		if !ok || r.batches == 0 || r.rows == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("checkpoint %s: %.2f per batch (%d batches of %.0f records on average), "+
			"%.3f per record, %s ms from Run to the first read", c, float64(r.exchanges)/float64(r.batches),
			r.batches, float64(r.rows)/float64(r.batches), float64(r.exchanges)/float64(r.rows), msText(r.startup)))
	}
	if len(parts) > 0 {
		note("round trips through the proxy (the client sending after the server answered, every connection of "+
			"the processor), from the first read that brought records until the position held the last row, "+
			"and the start-up before that read (included in the figure): %s.", strings.Join(parts, "; "))
	}
}

// msHundredths is d in milliseconds with two decimals.
func msHundredths(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 2, 64) }

// startNetProxy starts a proxy adding netDelay each way in front of the server the tests' databases live
// on, closed when the test ends.
func startNetProxy(tb testing.TB) *tcpproxy.Proxy {
	tb.Helper()
	db := pgtest.NewDB(tb, pgtest.Options{Empty: true})
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	if strings.HasPrefix(cc.Host, "/") {
		tb.Fatalf("the network measures need a server on TCP, not the socket in %s", cc.Host)
	}
	p, err := tcpproxy.Start(tcpproxy.Config{Target: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))),
		Delay: netDelay})
	if err != nil {
		tb.Fatalf("proxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// measurePing returns the median time of n SELECT 1 round trips on a connection through proxy (nil:
// none), after a few unmeasured.
func measurePing(tb testing.TB, proxy *tcpproxy.Proxy, n int) time.Duration {
	db := pgtest.NewDB(tb, pgtest.Options{Empty: true})
	conn := connectURL(tb, viaURL(db, proxy))
	ctx := context.Background()
	times := make([]time.Duration, 0, n)
	for i := range n + 10 {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			tb.Fatalf("select 1: %v", err)
		}
		if i >= 10 {
			times = append(times, time.Since(start))
		}
	}
	slices.Sort(times)
	return times[len(times)/2]
}

// measureNoopNet drains a backlog of n events through the stdout handler writing to a file, as `inorder
// run` with its stdout sink does, with the processor's connections through proxy and the default batch
// size, and checks that the file holds every record.
func measureNoopNet(tb testing.TB, proxy *tcpproxy.Proxy, checkpoint processor.Checkpoint, n int) drained {
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	lastID, lastAt := lastRow(tb, db, "events")
	noteServer(tb, db.Pool)
	f, err := os.CreateTemp(tb.TempDir(), "records-*.jsonl")
	if err != nil {
		tb.Fatalf("create file: %v", err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	d := drainVia(tb, db, proxy, processor.Config[handlers.Row]{
		StartFrom:  inordertype.StartFromBeginning,
		Process:    "bench_net_" + string(checkpoint),
		Source:     inordertype.Source{Table: "events"},
		Handler:    stdout.New[handlers.Row](f),
		Checkpoint: checkpoint,
	}, n, lastID, lastAt, 3*time.Minute)
	out, err := os.ReadFile(f.Name())
	if err != nil {
		tb.Fatalf("read file: %v", err)
	}
	if lines := bytes.Count(out, []byte("\n")); lines < n {
		tb.Fatalf("the file holds %d lines, want at least %d", lines, n)
	}
	return d
}

// BenchmarkNetwork runs the network measures through one proxy, each inorder measure right after the limit
// it is compared with, as in the rest of the table.
func BenchmarkNetwork(b *testing.B) {
	proxy := startNetProxy(b)
	pingProxy, pingDirect := measurePing(b, proxy, netPings), measurePing(b, nil, netPings)
	runs := map[processor.Checkpoint]netRun{}
	noop := func(b *testing.B, key string, checkpoint processor.Checkpoint, n int) {
		d := measureNoopNet(b, proxy, checkpoint, n)
		record(b, key, d.result)
		b.ReportMetric(float64(d.exchanges)/float64(max(d.batches, 1)), "roundtrips/batch")
		runs[checkpoint] = netRun{rows: d.n, batches: d.batches, exchanges: d.exchanges, startup: d.startup}
	}
	b.Run("keyset", func(b *testing.B) {
		record(b, "net_keyset", measureKeysetVia(b, proxy, keysetRows, keysetPasses))
	})
	b.Run("batch", func(b *testing.B) { noop(b, "net_batch", processor.CheckpointBatch, netBatchRows) })
	b.Run("commit", func(b *testing.B) {
		record(b, "net_commit", measureCommitVia(b, proxy, netCommitN, netCommitLimit, false))
	})
	b.Run("async", func(b *testing.B) {
		record(b, "net_async", measureCommitVia(b, proxy, netCommitN, netCommitLimit, true))
	})
	b.Run("record", func(b *testing.B) { noop(b, "net_record", processor.CheckpointRecord, netRecordRows) })
	b.Run("webhook_direct", func(b *testing.B) {
		record(b, "net_webhook_direct", measureWebhook(b, 64, webhookKeys, webhookRowsMany, webhookLatency))
	})
	b.Run("webhook", func(b *testing.B) {
		record(b, "net_webhook", measureWebhookVia(b, proxy, 64, webhookKeys, webhookRowsMany, webhookLatency))
	})
	figuresMu.Lock()
	defer figuresMu.Unlock()
	netNotes.pingProxy, netNotes.pingDirect, netNotes.runs = pingProxy, pingDirect, runs
}

// testNetworkMeasures runs the network measures on a few rows, for TestMeasures.
func testNetworkMeasures(t *testing.T) {
	proxy := startNetProxy(t)
	if through, around := measurePing(t, proxy, 10), measurePing(t, nil, 10); through < 2*netDelay || around <= 0 {
		t.Errorf("ping: %s through the proxy, %s around it", through, around)
	}
	for name, r := range map[string]result{
		"net_keyset":  measureKeysetVia(t, proxy, 2500, 1),
		"net_commit":  measureCommitVia(t, proxy, 20, time.Minute, false),
		"net_async":   measureCommitVia(t, proxy, 20, time.Minute, true),
		"net_webhook": measureWebhookVia(t, proxy, 64, 10, 200, time.Millisecond),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
	for checkpoint, n := range map[processor.Checkpoint]int{processor.CheckpointBatch: 2500, processor.CheckpointRecord: 300} {
		if d := measureNoopNet(t, proxy, checkpoint, n); d.n != n || d.rate() <= 0 || d.batches == 0 || d.exchanges <= 0 {
			t.Errorf("noop through the proxy, checkpoint %s: %+v", checkpoint, d)
		}
	}
}
