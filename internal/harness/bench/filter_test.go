package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// What a filter costs: a process with a filter that keeps 1 % of a 1,000,000-row backlog drains it,
// with the partial index the docs name, about as fast as a process drains a table that holds only the
// rows it keeps: the rows it passes over are never read, and its position moves past the last of them up
// to the horizon without a handler call.
const (
	filterRows  = 1_000_000
	filterEvery = 100 // one row in filterEvery matches
)

func filterLines() []line {
	return []line{
		{key: "filter_only", label: fmt.Sprintf("inorder noop drain of a table of only the %d rows a filter would keep", filterRows/filterEvery),
			limit: true},
		{key: "filter_1pct", label: fmt.Sprintf("the same rows through a filter keeping 1%% of %d, with its partial index", filterRows),
			ref: "filter_only", refLabel: "only them", target: &target{atMost: true, v: 1.5}},
	}
}

// routed is a row of the routed outbox, as the noop handler receives it.
type routed struct {
	ID   int64  `db:"id"`
	Type string `db:"type"`
}

const filterWhere = "type = 'payment.captured'"

// filteredOutbox is a fresh database whose outbox, with the insert clock, holds n rows, one in every
// matching filterWhere (the first, and never the last: the drain ends with the rows passed over), or, with
// only, just the n/every rows that would match. With the filter, the partial index on the filter serves
// its read.
func filteredOutbox(tb testing.TB, n, every int, only bool) (*pgtest.DB, time.Time) {
	tb.Helper()
	db := pgtest.New(tb)
	db.Exec(tb, `CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		type         text NOT NULL,
		payload      text NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	)`)
	pgtest.AddClock(tb, db, "outbox")
	if only {
		db.Exec(tb, `INSERT INTO outbox (aggregate_id, type, payload)
			SELECT 'k' || (g % 100), 'payment.captured', repeat('x', 100) FROM generate_series(1, $1) g`, n/every)
	} else {
		db.Exec(tb, `INSERT INTO outbox (aggregate_id, type, payload)
			SELECT 'k' || (g % 100), CASE WHEN g % $2 = 1 THEN 'payment.captured' ELSE 'order.placed' END, repeat('x', 100)
			FROM generate_series(1, $1) g`, n, every)
		db.Exec(tb, "CREATE INDEX outbox_payments_idx ON outbox ((coalesce(inorder_at, created_at)), id) WHERE "+filterWhere)
	}
	db.Exec(tb, "VACUUM ANALYZE outbox")
	// The rows to deliver read once, as an outbox's recent rows are, so that both drains find them in
	// shared buffers: a filter's rows lie one to a page where the other table packs them, and what is
	// measured is the filter's read, not how much of the table the operating system's cache still holds.
	db.Exec(tb, "SELECT count(payload) FROM outbox WHERE "+filterWhere)
	var last time.Time
	if err := db.Pool.QueryRow(context.Background(), "SELECT max(coalesce(inorder_at, created_at)) FROM outbox").Scan(&last); err != nil {
		tb.Fatalf("last row: %v", err)
	}
	return db, last
}

// measureFilter drains the outbox of n rows through a filter keeping one in every, and the outbox of only
// those rows without one, each until its position has passed the table's last row: the time from Run to
// then (the start-up's checks included), the best of filterRounds, and the rows kept.
func measureFilter(tb testing.TB, n, every int) (filtered, only figure) {
	drainTo := func(db *pgtest.DB, last time.Time, where, process string) time.Duration {
		cc, err := pgx.ParseConfig(db.URL)
		if err != nil {
			tb.Fatalf("parse url: %v", err)
		}
		obs := newEndObserver(last, nil)
		handled := 0
		p, err := processor.New(processor.Config[routed]{
			Process: process, ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
			Source: inordertype.Source{Table: "outbox", Where: where, Columns: []string{"id", "type"}},
			Handler: handlers.HandlerFunc[routed](func(context.Context, *handlers.Record[routed]) error {
				handled++
				return nil
			}),
			Checkpoint: processor.CheckpointBatch, PollInterval: 5 * time.Millisecond, Observer: obs,
		})
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		start := time.Now()
		go func() { ran <- p.Run(ctx) }()
		select {
		case <-obs.done:
		case err := <-ran:
			tb.Fatalf("processor stopped before the end of the backlog: %v", err)
		case <-time.After(5 * time.Minute):
			tb.Fatalf("backlog of %d rows (filter %q) not passed within 5m", n, where)
		}
		took := time.Since(start)
		cancel()
		if err := <-ran; err != nil {
			tb.Fatalf("processor: %v", err)
		}
		if handled != n/every {
			tb.Fatalf("filter %q: %d records handled, want %d", where, handled, n/every)
		}
		return took
	}
	onlyDB, onlyLast := filteredOutbox(tb, n, every, true)
	db, last := filteredOutbox(tb, n, every, false)
	// The best of filterRounds drains of each, taken in turns, each by a new process from the beginning: on
	// a machine shared with other work a single drain of a tenth of a second is mostly noise.
	var bestOnly, bestFiltered time.Duration
	for i := range filterRounds {
		o := drainTo(onlyDB, onlyLast, "", fmt.Sprint("bench_only_", i))
		f := drainTo(db, last, filterWhere, fmt.Sprint("bench_filter_", i))
		if i == 0 || o < bestOnly {
			bestOnly = o
		}
		if i == 0 || f < bestFiltered {
			bestFiltered = f
		}
	}
	return figure{n: n / every, value: ms(bestFiltered), unit: millis}, figure{n: n / every, value: ms(bestOnly), unit: millis}
}

// filterRounds is how many drains of each table measureFilter takes the best of.
const filterRounds = 5

func BenchmarkFilter(b *testing.B) {
	filtered, only := measureFilter(b, filterRows, filterEvery)
	recordFigure(b, "filter_only", only)
	recordFigure(b, "filter_1pct", filtered)
}

// testFilterMeasures runs the filter's measure small, for TestMeasures.
func testFilterMeasures(t *testing.T) {
	if filtered, only := measureFilter(t, 20_000, 100); filtered.value <= 0 || only.value <= 0 {
		t.Errorf("filter: %+v %+v", filtered, only)
	}
}
