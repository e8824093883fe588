package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/setting"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// The insert clock's measures: what its trigger costs the application's inserts; adding it to a large
// table while writers insert (no rewrite, no wait for a lock past its timeout, their rate kept); and the
// lag of streams of every kind of created_at while a real pg_dump is held open.
const (
	clockTableRows = 10_000_000 // rows of the table the clock is added to
	clockWriters   = 4          // writers inserting single rows throughout
	clockWindow    = 5 * time.Second
	dumpHold       = 2 * time.Minute // how long the pg_dump is held
	dumpRate       = 100             // rows/s into each of the three tables: ~300 rows/s in all
	lagTargetMs    = 2000
	dumpSizeMiB    = 16 // inorder's tables may hold at most this after the hold
)

func clockLines() []line {
	return []line{
		{key: "app_noclock", label: "application inserts, 8 writers, a table without the clock", limit: true},
		{key: "app_clock", label: "application inserts, 8 writers, the clock instead of a (created_at, id) index",
			ref: "app_noclock", refLabel: "without", target: &target{v: 0.9}},
		{key: "app_clock_both", label: "application inserts, 8 writers, the clock beside the (created_at, id) index",
			ref: "app_noclock", refLabel: "without"},
		{key: "addclock_before", label: "inserts/s beside a 10M-row table, before its clock is added", limit: true},
		{key: "addclock_during", label: "inserts/s while inorder migrate --table adds it", ref: "addclock_before",
			refLabel: "before", target: &target{v: 0.8}},
		{key: "addclock_took", label: "inorder migrate --table on 10M rows: the whole of it"},
		{key: "addclock_wait", label: "the longest insert while it runs", ref: "locktimeout", refLabel: "lock timeout 2s"},
		{key: "dump_lag_now", label: "max lag, pg_dump held 2m, 300 rows/s: now() default, the clock", ref: "lagtarget",
			refLabel: "target 2s"},
		{key: "dump_lag_app", label: "the same: created_at from the application (no default)", ref: "lagtarget",
			refLabel: "target 2s"},
		{key: "dump_lag_clock", label: "the same: clock_timestamp() default overridden", ref: "lagtarget",
			refLabel: "target 2s"},
		{key: "dump_lag_optin", label: "the same: now() default, no clock, --horizon transactions", ref: "lagtarget",
			refLabel: "target 2s"},
		{key: "dump_size", label: "inorder's tables after the hold", ref: "dumpsize", refLabel: "16 MiB"},
	}
}

func init() {
	fixed["locktimeout"] = figure{value: float64(setting.DefaultLockTimeout / time.Millisecond), unit: millis}
	fixed["lagtarget"] = figure{value: lagTargetMs, unit: millis}
	fixed["dumpsize"] = figure{value: dumpSizeMiB, unit: mebibytes}
}

// Tables of the clock's cost: without it (the (created_at, id) index a table without the clock needs),
// with it in place of that index (which inorder no longer reads, what the docs advise), and with both.
const (
	costNoClock = iota
	costClock
	costClockBoth
)

// measureClockCost is the application's insert rate into the three tables, in turns for rounds, each run d
// long with writers pgbench clients: the median of each.
func measureClockCost(tb testing.TB, writers, rounds int, d time.Duration) [3]result {
	tb.Helper()
	var runs [3][]result
	for round := range rounds {
		for i := range 3 {
			kind := (i + round) % 3
			db := pgtest.New(tb)
			db.Exec(tb, eventsDDL)
			if kind != costNoClock {
				pgtest.AddClock(tb, db, "events")
			}
			if kind == costClock {
				db.Exec(tb, "DROP INDEX events_created_at_id_idx")
			}
			runs[kind] = append(runs[kind], pgbenchInserts(tb, db, writers, d))
		}
	}
	return [3]result{median(runs[0]), median(runs[1]), median(runs[2])}
}

// insertLoad inserts single rows into table from writers connections until stopped, counting them and
// keeping the longest insert.
type insertLoad struct {
	n       atomic.Int64
	longest atomic.Int64 // ns
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startInserts(tb testing.TB, db *pgtest.DB, table string, writers int) *insertLoad {
	tb.Helper()
	l := &insertLoad{stop: make(chan struct{})}
	ctx := context.Background()
	for range writers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				began := time.Now()
				if _, err := db.Pool.Exec(ctx, "INSERT INTO "+table+" (created_at, note) VALUES (now(), 'w')"); err != nil {
					tb.Errorf("insert: %v", err)
					return
				}
				took := int64(time.Since(began))
				for {
					was := l.longest.Load()
					if took <= was || l.longest.CompareAndSwap(was, took) {
						break
					}
				}
				l.n.Add(1)
			}
		})
	}
	tb.Cleanup(l.end)
	return l
}

func (l *insertLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// rate counts the inserts over d, and longer until there is one: a short d on a busy machine can pass
// before the writers' first insert.
func (l *insertLoad) rate(d time.Duration) result {
	n0, t0 := l.n.Load(), time.Now()
	time.Sleep(d)
	for deadline := time.Now().Add(time.Minute); l.n.Load() == n0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return result{n: int(l.n.Load() - n0), elapsed: time.Since(t0)}
}

// clockAdded is what adding the clock to a large table came to.
type clockAdded struct {
	before, during result
	took           time.Duration
	longest        time.Duration // the longest insert while it ran
}

// measureAddClock fills a table with rows, starts writers, measures their rate, then adds the clock as
// inorder migrate --table does while they go on, measuring their rate and their longest insert meanwhile.
// A rewrite of the table fails the measure.
func measureAddClock(tb testing.TB, rows, writers int, window time.Duration) clockAdded {
	tb.Helper()
	ctx := context.Background()
	db := pgtest.New(tb)
	db.Exec(tb, fmt.Sprintf(`CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text);
		INSERT INTO outbox (created_at, note) SELECT clock_timestamp(), 'row ' || g FROM generate_series(1, %d) g;
		CREATE INDEX ON outbox (created_at, id)`, rows))
	db.Exec(tb, "VACUUM ANALYZE outbox")
	var node0, node1 uint32
	if err := db.Pool.QueryRow(ctx, "SELECT relfilenode FROM pg_class WHERE oid = 'outbox'::regclass").Scan(&node0); err != nil {
		tb.Fatalf("relfilenode: %v", err)
	}
	load := startInserts(tb, db, "outbox", writers)
	var out clockAdded
	out.before = load.rate(window)
	load.longest.Store(0)
	conn := connect(tb, db)
	n0, began := load.n.Load(), time.Now()
	if err := migrations.AddClock(ctx, conn, "outbox", migrations.ClockOpts{}); err != nil {
		tb.Fatalf("add the clock: %v", err)
	}
	out.took = time.Since(began)
	out.during = result{n: int(load.n.Load() - n0), elapsed: out.took}
	out.longest = time.Duration(load.longest.Load())
	load.end()
	if err := db.Pool.QueryRow(ctx, "SELECT relfilenode FROM pg_class WHERE oid = 'outbox'::regclass").Scan(&node1); err != nil {
		tb.Fatalf("relfilenode: %v", err)
	}
	if node0 != node1 {
		tb.Fatalf("the table was rewritten: relfilenode %d, then %d", node0, node1)
	}
	return out
}

// dumpStream is one stream of the dump measure: a table, how its writer stamps created_at, and the
// processor's horizon.
type dumpStream struct {
	key, ddlDefault, stamp string
	clock                  bool
	horizon                inordertype.Horizon
}

var dumpStreams = []dumpStream{
	{key: "dump_lag_now", ddlDefault: "DEFAULT now()", stamp: "DEFAULT", clock: true},
	{key: "dump_lag_app", stamp: "clock_timestamp() - interval '1 second'", clock: true},
	{key: "dump_lag_clock", ddlDefault: "DEFAULT clock_timestamp()", stamp: "clock_timestamp() - interval '1 second'", clock: true},
	{key: "dump_lag_optin", ddlDefault: "DEFAULT now()", stamp: "DEFAULT", horizon: inordertype.HorizonTransactions},
}

// lagRow is what a stream's handler sees: the id, and when its writer committed it (in its payload).
type lagRow struct {
	ID   int64     `db:"id"`
	Sent time.Time `db:"sent"`
}

// measureDumpLag runs a stream of each kind of created_at while a real pg_dump of their database is held
// open for hold, each table written at rate rows/s, and returns the longest any row took from its commit to
// its delivery, by stream, and the size of inorder's tables at the end.
func measureDumpLag(tb testing.TB, hold time.Duration, rate int) (map[string]time.Duration, float64) {
	tb.Helper()
	ctx := context.Background()
	db := pgtest.New(tb)
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	var mu sync.Mutex
	lag := map[string]time.Duration{}
	for i, s := range dumpStreams {
		table := fmt.Sprintf("outbox_%d", i)
		db.Exec(tb, fmt.Sprintf(`CREATE TABLE %[1]s (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL %[2]s,
			sent timestamptz NOT NULL); CREATE INDEX ON %[1]s (created_at, id)`, table, s.ddlDefault))
		if s.clock {
			pgtest.AddClock(tb, db, table)
		}
		p, err := processor.New(processor.Config[lagRow]{
			Process: s.key, ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
			Source: inordertype.Source{Table: table, Columns: []string{"id", "sent"}, Horizon: s.horizon},
			Handler: handlers.HandlerFunc[lagRow](func(_ context.Context, rec *handlers.Record[lagRow]) error {
				took := time.Since(rec.Value.Sent)
				mu.Lock()
				lag[s.key] = max(lag[s.key], took)
				mu.Unlock()
				return nil
			}),
		})
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- p.Run(runCtx) }()
		tb.Cleanup(func() {
			cancel()
			if err := <-ran; err != nil {
				tb.Errorf("processor: %v", err)
			}
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range dumpStreams {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				// Sent is the writer's clock just before its commit: the lag is to the delivery.
				if _, err := db.Pool.Exec(ctx, fmt.Sprintf("INSERT INTO outbox_%d (created_at, sent) VALUES (%s, clock_timestamp())",
					i, s.stamp)); err != nil {
					tb.Errorf("insert: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(time.Second) // the streams under way
	mu.Lock()
	clear(lag) // the lag of the hold, not of the start
	mu.Unlock()
	dump := pgtest.HoldPgDump(tb, db)
	time.Sleep(hold)
	if !dump.Running(tb, db) {
		tb.Fatalf("the dump ended before the hold did")
	}
	dump.End()
	close(stop)
	wg.Wait()
	// Every row is delivered, the last ones after the dump.
	deadline := time.Now().Add(time.Minute)
	for _, s := range dumpStreams {
		for {
			var behind bool
			if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inorder.position WHERE process_name = $1
				AND position_id::bigint < (SELECT max(id) FROM `+fmt.Sprintf("outbox_%d", slices.Index(dumpStreams, s))+`))`,
				s.key).Scan(&behind); err != nil {
				tb.Fatalf("position: %v", err)
			}
			if !behind {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s: rows still undelivered a minute after the dump", s.key)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var bytes int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
		WHERE c.relnamespace = 'inorder'::regnamespace AND c.relkind IN ('r', 'p')`).Scan(&bytes); err != nil {
		tb.Fatalf("sizes: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return maps(lag), float64(bytes) / (1 << 20)
}

func maps(m map[string]time.Duration) map[string]time.Duration {
	out := make(map[string]time.Duration, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func BenchmarkClock(b *testing.B) {
	b.Run("cost", func(b *testing.B) {
		r := measureClockCost(b, appWriters, appRounds, appDuration)
		record(b, "app_noclock", r[costNoClock])
		record(b, "app_clock", r[costClock])
		record(b, "app_clock_both", r[costClockBoth])
	})
	b.Run("add", func(b *testing.B) {
		a := measureAddClock(b, clockTableRows, clockWriters, clockWindow)
		record(b, "addclock_before", a.before)
		record(b, "addclock_during", a.during)
		recordFigure(b, "addclock_took", figure{n: clockTableRows, value: ms(a.took), unit: millis})
		recordFigure(b, "addclock_wait", figure{value: ms(a.longest), unit: millis})
	})
	b.Run("dump", func(b *testing.B) {
		lag, size := measureDumpLag(b, dumpHold, dumpRate)
		for _, s := range dumpStreams {
			recordFigure(b, s.key, figure{value: ms(lag[s.key]), unit: millis})
		}
		recordFigure(b, "dump_size", figure{value: size, unit: mebibytes})
	})
}

// testClockMeasures runs the clock's measures small, for TestMeasures.
func testClockMeasures(t *testing.T) {
	for i, r := range measureClockCost(t, 2, 1, 300*time.Millisecond) {
		if r.n == 0 {
			t.Errorf("clock cost %d: %+v", i, r)
		}
	}
	if a := measureAddClock(t, 20_000, 2, 300*time.Millisecond); a.before.n == 0 || a.during.n < 0 || a.took <= 0 {
		t.Errorf("add clock: %+v", a)
	}
	lag, size := measureDumpLag(t, 2*time.Second, 20)
	for _, s := range dumpStreams[:3] {
		if lag[s.key] <= 0 || lag[s.key] > 20*time.Second {
			t.Errorf("%s: lag %s", s.key, lag[s.key])
		}
	}
	if size <= 0 {
		t.Errorf("dump: size %v", size)
	}
}
