package bench

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// runProcessor runs a noop processor on the events table of db until the test ends: mode "poll" polls
// every 200ms without the probe, "default" runs with the defaults (the probe), "notify" listens for the
// insert trigger's notifications (without the probe).
func runProcessor(tb testing.TB, db *pgtest.DB, process, mode string) {
	tb.Helper()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	cfg := processor.Config[event]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   process, ClientConfig: processor.ClientConfig{ConnConfig: cc}, Handler: noopHandler,
		Source:       inordertype.Source{Table: "events", Columns: eventColumns},
		PollInterval: latencyPoll, Checkpoint: processor.CheckpointRecord,
	}
	switch mode {
	case "poll":
		cfg.ProbeInterval = -1
	case "notify":
		cfg.ProbeInterval, cfg.Listen = -1, true
	}
	p, err := processor.New(cfg)
	if err != nil {
		tb.Fatalf("processor: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			tb.Errorf("processor: %v", err)
		}
	})
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// measureAppWrites is the application's own insert rate beside inorder: pgbench with writers clients,
// each inserting single rows in transactions of their own for d, while (mode other than "none") a
// processor delivers every row as it commits.
func measureAppWrites(tb testing.TB, mode string, writers int, d time.Duration) result {
	tb.Helper()
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	ctx := context.Background()
	if mode == "notify" {
		conn := connect(tb, db)
		if err := migrations.CreateNotifyTrigger(ctx, conn, "events"); err != nil {
			tb.Fatalf("notify trigger: %v", err)
		}
	}
	if mode != "none" {
		runProcessor(tb, db, "bench_app_"+mode, mode)
	}
	return pgbenchInserts(tb, db, writers, d)
}

// pgbenchInserts is the rate of single-row inserts into db's events table from writers pgbench clients,
// each in transactions of its own, over d.
func pgbenchInserts(tb testing.TB, db *pgtest.DB, writers int, d time.Duration) result {
	tb.Helper()
	pgbench, err := osexec.LookPath("pgbench")
	if err != nil {
		if bin, ferr := pgcluster.FindBinDir(); ferr == nil {
			pgbench = filepath.Join(bin, "pgbench")
		}
	}
	script := filepath.Join(tb.TempDir(), "insert.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO events (aggregate_id, seq) VALUES ('app', 1);\n"), 0o644); err != nil {
		tb.Fatalf("script: %v", err)
	}
	out, err := osexec.Command(pgbench, "-n", "-f", script, "-c", strconv.Itoa(writers), "-j", strconv.Itoa(min(writers, 2)),
		"-T", strconv.Itoa(max(1, int(d.Seconds()))), db.URL).CombinedOutput()
	if err != nil {
		tb.Fatalf("pgbench: %v: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		tb.Fatalf("pgbench: no tps in %s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	secs := max(1, int(d.Seconds()))
	return result{n: int(tps * float64(secs)), elapsed: time.Duration(secs) * time.Second}
}

// measureIdle runs n processes with nothing to read in one Go process and counts the transactions their
// database commits and rolls back over window (pg_stat_database, which every statement outside a
// transaction counts as one), after they have settled.
func measureIdle(tb testing.TB, n int, settle, window time.Duration) figure {
	tb.Helper()
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, "INSERT INTO events (aggregate_id, seq) VALUES ('k', 1)")
	for i := range n {
		runProcessor(tb, db, fmt.Sprintf("bench_idle_%d", i), "default")
	}
	ctx := context.Background()
	var settled int
	deadline := time.Now().Add(time.Minute)
	for settled < n && time.Now().Before(deadline) { // every process has delivered the one row
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inorder.position WHERE position_id IS NOT NULL`).Scan(&settled); err != nil {
			tb.Fatalf("cursor: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(settle) // quiet: the probes have backed off, the stats flushed
	count := func() int64 {
		var x int64
		if err := db.Pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&x); err != nil {
			tb.Fatalf("pg_stat_database: %v", err)
		}
		return x
	}
	c0, t0 := count(), time.Now()
	time.Sleep(window)
	c1, t1 := count(), time.Now()
	return figure{n: n, value: float64(c1-c0) / t1.Sub(t0).Seconds(), unit: perSecond}
}

// probeQuietFor is how long a stream has nothing before its probe backs off further (probeQuietAfter in
// package processor).
const probeQuietFor = 10 * time.Second
