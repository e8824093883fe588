package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// The idle fleet: many processes over one table in one instance (a process per tenant, or one outbox fanned
// out), all on one Client, as `inorder run --config` runs them. What it costs the database while nothing
// happens must not grow with the processes, nor must the time for a new row to reach them all.
const (
	idleFleetN        = 1000
	idleFleetOwnedBy  = 10 * time.Second // target: every process owned within it of the start
	idleFleetTPS      = 100              // target: transactions/s on the database while idle, at most
	idleFleetFanOutBy = time.Second      // target: a new row delivered to every process within it
	idleFleetWindow   = 10 * time.Second // the idle sampling period
)

// idleFleetRun is one measure of the idle fleet.
type idleFleetRun struct {
	n      int
	owned  time.Duration // from the start of the processes to every one owned
	tps    float64       // transactions/s on the database while idle
	fanOut time.Duration // from a row's commit to every process having delivered it
}

// measureIdleFleet runs n processes over one table on one Client (its default connections), each with the
// defaults (the probe, checkpoint record), and measures how long until every process is owned, the
// transactions/s on the database once they are quiet (pg_stat_database's xact_commit + xact_rollback over
// window, after settle), and how long a new row takes to reach every process.
func measureIdleFleet(tb testing.TB, n int, settle, window time.Duration) idleFleetRun {
	tb.Helper()
	db := pgtest.New(tb)
	noteServer(tb, db.Pool)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, "INSERT INTO events (aggregate_id, seq) VALUES ('k', 1)")
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	const instance = "idle-fleet"
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, Instance: instance})
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	tb.Cleanup(client.Close)
	// seen counts, per process, the records delivered with the id awaited (0: none awaited).
	var awaited atomic.Int64
	var seen atomic.Int64
	procs := make([]*processor.Processor[event], n)
	for i := range n {
		p, err := processor.New(processor.Config[event]{
			Process: fmt.Sprintf("tenant_%04d", i), Client: client, StartFrom: inordertype.StartFromBeginning,
			Source: inordertype.Source{Table: "events", Columns: eventColumns},
			Handler: handlers.HandlerFunc[event](func(_ context.Context, r *handlers.Record[event]) error {
				if r.Value.ID == awaited.Load() {
					seen.Add(1)
				}
				return nil
			}),
		})
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
		procs[i] = p
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, n)
	began := time.Now()
	for _, p := range procs {
		wg.Go(func() {
			if err := p.Run(ctx); err != nil {
				errs <- err
			}
		})
	}
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			tb.Errorf("processor: %v", err)
		}
	})
	bg := context.Background()
	count := func(sql string, args ...any) int64 {
		var x int64
		if err := db.Pool.QueryRow(bg, sql, args...).Scan(&x); err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
		return x
	}
	await := func(what string, cond func() bool) {
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				tb.Fatalf("%s: not within 2 minutes", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the condition, not waiting for it
		}
	}
	run := idleFleetRun{n: n}
	await("every process owned", func() bool {
		return count(`SELECT count(*) FROM inorder.cursor
			WHERE owner_instance = $1 AND lease_expires_at > clock_timestamp()`, instance) == int64(n)
	})
	run.owned = time.Since(began)
	await("every process caught up", func() bool {
		return count(`SELECT count(*) FROM inorder.position WHERE position_id IS NOT NULL`) == int64(n)
	})
	time.Sleep(settle) // quiet: the probes have backed off, the stats flushed
	xacts := func() int64 {
		return count(`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`)
	}
	c0, t0 := xacts(), time.Now()
	time.Sleep(window)
	c1, t1 := xacts(), time.Now()
	run.tps = float64(c1-c0) / t1.Sub(t0).Seconds()

	var id int64
	if err := db.Pool.QueryRow(bg, "SELECT nextval('events_id_seq')").Scan(&id); err != nil {
		tb.Fatalf("nextval: %v", err)
	}
	awaited.Store(id)
	db.Exec(tb, fmt.Sprintf("INSERT INTO events (id, aggregate_id, seq) VALUES (%d, 'k', 2)", id))
	committed := time.Now()
	await("the new row delivered to every process", func() bool { return seen.Load() == int64(n) })
	run.fanOut = time.Since(committed)
	return run
}

// idleFleetLines are the idle fleet's lines of the table, each beside its target.
func idleFleetLines() []line {
	who := fmt.Sprintf("%d idle processes over one table in one instance", idleFleetN)
	return []line{
		{key: "idlefleet_owned", label: who + ": every one owned after the start",
			target: &target{ofValue: true, atMost: true, v: float64(idleFleetOwnedBy / time.Millisecond)}},
		{key: "idlefleet_tps", label: who + ": transactions/s on the database",
			target: &target{ofValue: true, atMost: true, v: idleFleetTPS}},
		{key: "idlefleet_fanout", label: who + ": a new row delivered to every one",
			target: &target{ofValue: true, atMost: true, v: float64(idleFleetFanOutBy / time.Millisecond)}},
	}
}

// BenchmarkIdleFleet measures 1,000 idle processes over one table in one instance: the time until every
// one is owned, the transactions/s they cost the database while idle, and the time for a new row to reach
// them all.
func BenchmarkIdleFleet(b *testing.B) {
	r := measureIdleFleet(b, idleFleetN, probeQuietFor+2*time.Second, idleFleetWindow)
	recordFigure(b, "idlefleet_owned", figure{n: r.n, value: ms(r.owned), unit: millis})
	recordFigure(b, "idlefleet_tps", figure{n: r.n, value: r.tps, unit: perSecond})
	recordFigure(b, "idlefleet_fanout", figure{n: r.n, value: ms(r.fanOut), unit: millis})
	b.Logf("idle fleet of %d: owned after %s, %.1f transactions/s idle, a new row to all in %s",
		r.n, r.owned.Round(time.Millisecond), r.tps, r.fanOut.Round(time.Millisecond))
}
