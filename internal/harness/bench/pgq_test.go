package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// PgQ as a peer: the oldest Postgres-native queue drains the same backlog through its consumer functions,
// beside the library's noop drain and the CLI's stdout drain, in turns in the same run.
const (
	pgqRows   = noopBatchRows // events in the queue, rows in inorder's table
	pgqTick   = 1000          // events per tick: a PgQ batch, as inorder's BatchSize
	pgqRounds = 3             // turns of the three drains; the median of each counts
	pgqQueue  = "bench"
	pgqName   = "bench_consumer"
)

// pgqLines are PgQ's lines of the table: its consumer, then inorder's two drains beside it.
func pgqLines() []line {
	return []line{
		{key: "pgq", label: "pgq: consumer, ticks of 1000 events", limit: true},
		{key: "batch_pgq", label: "inorder noop, checkpoint batch, beside PgQ", ref: "pgq", refLabel: "PgQ consumer",
			target: &target{v: 1.0}},
		{key: "cli_pgq", label: "inorder run, stdout to /dev/null, beside PgQ", ref: "pgq", refLabel: "PgQ consumer",
			target: &target{v: 0.8}},
	}
}

// pgqNote is the footnote on PgQ's lines.
func pgqNote(note func(format string, args ...any)) {
	if _, ok := figures["pgq"]; !ok {
		return
	}
	note("pgq: the pgq extension (Debian's postgresql-%s-pgq3) in a fresh database each run: a queue, one "+
		"consumer registered, then %s events put in by pgq.insert_event, %s per transaction and a tick after "+
		"each (pgq.force_tick, then pgq.ticker), all before the clock starts. The consumer is a pgx connection, "+
		"timed from its connect until next_batch has none left: per batch one transaction of next_batch, "+
		"get_batch_events (every column of every event scanned into Go values and dropped) and finish_batch, "+
		"each commit durable. Beside it, in %d turns in a rotating order, the median of each: inorder's noop "+
		"drain of a %s-row table (as the noop lines: the library, BatchSize 1000, checkpoint batch) and `inorder "+
		"run --table events --start-from beginning --checkpoint batch --batch-size 1000` (the binary built by the "+
		"benchmark, every column, the stdout handler writing to /dev/null), timed from its start until the "+
		"position is the last row.", serverMajor(), thousands(pgqRows), thousands(pgqTick), pgqRounds,
		thousands(pgqRows))
}

// serverMajor is the major version of the server the figures come from, "NN" when unknown.
func serverMajor() string {
	if major, _, _ := strings.Cut(serverInfo.version, "."); major != "" {
		return major
	}
	return "NN"
}

// pgqMissing says why PgQ cannot run on db's server: "" when its extension is available, else which
// package provides it for the server's version.
func pgqMissing(tb testing.TB, db *pgtest.DB) string {
	tb.Helper()
	var available bool
	var version int
	err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgq'),
		current_setting('server_version_num')::int`).Scan(&available, &version)
	if err != nil {
		tb.Fatalf("pgq: look for the extension: %v", err)
	}
	if available {
		return ""
	}
	return fmt.Sprintf("the pgq extension is not installed for PostgreSQL %d (Debian: apt-get install postgresql-%d-pgq3)",
		version/10000, version/10000)
}

// pgqQueued is a fresh database whose PgQ queue holds n events for one registered consumer, in ticks of
// pgqTick. It is nil, with the reason, when the server has no PgQ.
func pgqQueued(tb testing.TB, n int) (*pgtest.DB, string) {
	tb.Helper()
	db := pgtest.New(tb)
	if why := pgqMissing(tb, db); why != "" {
		return nil, why
	}
	noteServer(tb, db.Pool)
	db.Exec(tb, "CREATE EXTENSION pgq")
	ctx := context.Background()
	conn := connect(tb, db)
	exec(tb, conn, "SELECT pgq.create_queue($1)", pgqQueue)
	exec(tb, conn, "SELECT pgq.register_consumer($1, $2)", pgqQueue, pgqName)
	for from := 1; from <= n; from += pgqTick {
		to := min(from+pgqTick-1, n)
		// The backlog's rows as events: the aggregate as the type, the sequence number as the data.
		exec(tb, conn, `SELECT count(pgq.insert_event($1, 'a' || (g % $2), g::text)) FROM generate_series($3::int, $4::int) g`,
			pgqQueue, orderingKeys, from, to)
		// A tick now, whatever the ticker's thresholds: a batch is these events.
		exec(tb, conn, "SELECT pgq.force_tick($1)", pgqQueue)
		var tick *int64
		if err := conn.QueryRow(ctx, "SELECT pgq.ticker($1)", pgqQueue).Scan(&tick); err != nil {
			tb.Fatalf("pgq tick: %v", err)
		}
		if tick == nil {
			tb.Fatalf("pgq tick after events %d to %d: the ticker made none", from, to)
		}
	}
	db.Exec(tb, "VACUUM ANALYZE")
	return db, ""
}

// pgqEvent is every column get_batch_events returns.
type pgqEvent struct {
	id                             int64
	at                             time.Time
	txid                           int64
	retry                          *int32
	typ, data                      *string
	extra1, extra2, extra3, extra4 *string
}

// measurePgQ drains db's queue (pgqQueued) as a PgQ consumer does, one transaction per batch, and checks
// that it got every one of the n events once.
func measurePgQ(tb testing.TB, db *pgtest.DB, n int) result {
	tb.Helper()
	ctx := context.Background()
	got, sum, batches := 0, int64(0), 0
	wantBatches := (n + pgqTick - 1) / pgqTick
	start := time.Now()
	conn := connect(tb, db)
	for {
		batch, err := pgqBatch(ctx, conn, func(e *pgqEvent) error {
			v, err := strconv.ParseInt(*e.data, 10, 64)
			got, sum = got+1, sum+v
			return err
		})
		if err != nil {
			tb.Fatalf("pgq consumer: %v", err)
		}
		if !batch {
			break
		}
		if batches++; batches > wantBatches { // a batch not finished comes again
			tb.Fatalf("pgq consumer: more than %d batches for %d events", wantBatches, n)
		}
	}
	elapsed := time.Since(start)
	if batches != wantBatches {
		tb.Fatalf("pgq consumer: %d batches, want %d of at most %d events", batches, wantBatches, pgqTick)
	}
	if want := int64(n) * int64(n+1) / 2; got != n || sum != want {
		tb.Fatalf("pgq consumer: %d events summing to %d, want %d summing to %d", got, sum, n, want)
	}
	return result{n: got, elapsed: elapsed}
}

// pgqBatch takes the consumer's next batch, passes each of its events to each and finishes it, in one
// transaction. It reports false when there was no batch.
func pgqBatch(ctx context.Context, conn *pgx.Conn, each func(*pgqEvent) error) (bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var batch *int64
	if err := tx.QueryRow(ctx, "SELECT pgq.next_batch($1, $2)", pgqQueue, pgqName).Scan(&batch); err != nil {
		return false, fmt.Errorf("next_batch: %w", err)
	}
	if batch == nil {
		return false, tx.Commit(ctx)
	}
	rows, err := tx.Query(ctx, `SELECT ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data,
		ev_extra1, ev_extra2, ev_extra3, ev_extra4 FROM pgq.get_batch_events($1)`, *batch)
	if err != nil {
		return false, fmt.Errorf("get_batch_events %d: %w", *batch, err)
	}
	var e pgqEvent
	_, err = pgx.ForEachRow(rows, []any{&e.id, &e.at, &e.txid, &e.retry, &e.typ, &e.data,
		&e.extra1, &e.extra2, &e.extra3, &e.extra4}, func() error { return each(&e) })
	if err != nil {
		return false, fmt.Errorf("get_batch_events %d: %w", *batch, err)
	}
	if _, err := tx.Exec(ctx, "SELECT pgq.finish_batch($1)", *batch); err != nil {
		return false, fmt.Errorf("finish_batch %d: %w", *batch, err)
	}
	return true, tx.Commit(ctx)
}

// measureCLIStdout drains a backlog of n events with the binary bin, `inorder run` with its stdout handler
// writing to /dev/null and a checkpoint per batch of 1000, timed from its start until the position is the
// last row.
func measureCLIStdout(tb testing.TB, bin string, n int) result {
	tb.Helper()
	db := insertedEvents(tb, n)
	lastID, _ := lastRow(tb, db, "events")
	noteServer(tb, db.Pool)
	const process = "bench_cli_stdout"
	args := []string{"run", "--process", process, "--table", "events", "--start-from", "beginning",
		"--checkpoint", "batch", "--batch-size", "1000", "--instance", "bench"}
	view := positionView(tb, db)
	limit := 3 * time.Minute
	start := time.Now()
	p := startInorder(tb, bin, []string{"DATABASE_URL=" + db.URL}, nil, args...)
	for {
		var pos *string
		err := db.Pool.QueryRow(context.Background(),
			"SELECT position_id FROM "+view+" WHERE process_name = $1", process).Scan(&pos)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			tb.Fatalf("read the position: %v", err)
		}
		if pos != nil && *pos == lastID {
			elapsed := time.Since(start)
			stopInorder(tb, p, args)
			return result{n: n, elapsed: elapsed}
		}
		if time.Since(start) > limit {
			tb.Fatalf("inorder %v: backlog of %d rows not drained within %s; logs:\n%s", args, n, limit, p.logs())
		}
		select {
		case <-p.done:
			tb.Fatalf("inorder %v exited during the drain: %v; logs:\n%s", args, p.err, p.logs())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stopInorder stops p with SIGTERM, as an operator does, so that it costs the machine nothing after its
// drain; it must stop cleanly.
func stopInorder(tb testing.TB, p *fleetProc, args []string) {
	tb.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(fleetStop):
		_ = p.cmd.Process.Kill()
		<-p.done
		tb.Fatalf("inorder %v did not stop within %s of SIGTERM; logs:\n%s", args, fleetStop, p.logs())
	}
	if p.err != nil {
		tb.Fatalf("inorder %v: %v after SIGTERM; logs:\n%s", args, p.err, p.logs())
	}
}

// BenchmarkPgQ drains the same backlog with PgQ's consumer, inorder's noop processor and the CLI's stdout
// handler, in turns in a rotating order, so that the machine's drift falls on all three alike.
func BenchmarkPgQ(b *testing.B) {
	if why := pgqMissing(b, pgtest.New(b)); why != "" {
		b.Skipf("pgq: %s; the PgQ lines are left out", why)
	}
	bin := buildInorder(b)
	drains := []string{"pgq", "batch_pgq", "cli_pgq"}
	runs := map[string][]result{}
	for round := range pgqRounds {
		for i := range drains {
			d := drains[(i+round)%len(drains)]
			var r result
			switch d {
			case "pgq":
				db, _ := pgqQueued(b, pgqRows)
				r = measurePgQ(b, db, pgqRows)
			case "batch_pgq":
				r = measureNoop(b, processor.CheckpointBatch, pgqRows)
			case "cli_pgq":
				r = measureCLIStdout(b, bin, pgqRows)
			}
			b.Logf("round %d, %s: %s in %s, %s/s", round+1, d, thousands(float64(r.n)), r.elapsed.Round(time.Millisecond),
				thousands(r.rate()))
			runs[d] = append(runs[d], r)
		}
	}
	for _, d := range drains {
		b.Run(d, func(b *testing.B) { record(b, d, median(runs[d])) })
	}
}

// testPgQMeasures runs PgQ's measures on a few events, for TestMeasures; without the extension it says so
// and leaves them out.
func testPgQMeasures(t *testing.T) {
	const n = 2500 // two full ticks and a short one
	db, why := pgqQueued(t, n)
	if why != "" {
		t.Logf("pgq: %s; its measures are left out", why)
	} else if r := measurePgQ(t, db, n); r.n != n || r.rate() <= 0 {
		t.Errorf("pgq: %d in %s", r.n, r.elapsed)
	}
	if r := measureCLIStdout(t, buildInorder(t), n); r.n != n || r.rate() <= 0 {
		t.Errorf("cli stdout: %d in %s", r.n, r.elapsed)
	}
}
