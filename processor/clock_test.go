package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// stamped is a row of an outbox whose created_at the application writes.
type stamped struct {
	ID        int64     `db:"id"`
	Key       string    `db:"aggregate_id"`
	CreatedAt time.Time `db:"created_at"`
}

// sliceSink collects what a processor delivers.
type sliceSink[T any] struct {
	mu  sync.Mutex
	got []T
}

func (s *sliceSink[T]) Handle(_ context.Context, rec *handlers.Record[T]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, rec.Value)
	return nil
}

func (s *sliceSink[T]) delivered() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// outboxDDL is an outbox whose created_at has the given default clause ("" for none).
func outboxDDL(def string) string {
	return fmt.Sprintf(`CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		created_at   timestamptz NOT NULL %s,
		payload      text
	);
	CREATE INDEX ON outbox (created_at, id);`, def)
}

// writer is one application writer of the outbox: it inserts rows of its own key one after another, each in
// a transaction of its own, stamping created_at as stampSQL says, and records the ids it committed.
type writer struct {
	key string
	// begin runs first in each transaction (an isolation level, a role's settings); stamp is the SQL of
	// created_at, evaluated when the event is built; delay is the work between building and inserting.
	begin, stamp string
	delay        time.Duration
	committed    []int64
}

func (w *writer) run(ctx context.Context, t *testing.T, pool *pgxpool.Pool, until time.Time) {
	for time.Now().Before(until) && ctx.Err() == nil {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		if w.begin != "" {
			_, err = tx.Exec(ctx, w.begin)
			require.NoError(t, err)
		}
		var at time.Time
		require.NoError(t, tx.QueryRow(ctx, "SELECT "+w.stamp).Scan(&at))
		if w.delay > 0 {
			time.Sleep(w.delay) // the application's work between stamping the event and inserting it
		}
		var id int64
		require.NoError(t, tx.QueryRow(ctx, "INSERT INTO outbox (aggregate_id, created_at) VALUES ($1, $2) RETURNING id",
			w.key, at).Scan(&id))
		require.NoError(t, tx.Commit(ctx))
		w.committed = append(w.committed, id)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTheInsertClockNeverSkipsARowTheApplicationDates: writers that stamp created_at themselves, as ORMs
// do (a host whose clock is behind or ahead, an event stamped when built and inserted 0.3s later, the
// database's own clock, a writer that calls itself pg_dump but inserts), all at once, into a table with the
// insert clock, whatever created_at's default: every committed row is delivered once, in order per key.
func TestTheInsertClockNeverSkipsARowTheApplicationDates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, def string
		skew      time.Duration
	}{
		{"no default, 2s behind", "", -2 * time.Second},
		{"clock_timestamp default overridden, 2s behind", "DEFAULT clock_timestamp()", -2 * time.Second},
		{"now default overridden, 2s behind", "DEFAULT now()", -2 * time.Second},
		{"no default, 20s behind", "", -20 * time.Second},
		{"no default, 20s ahead", "", 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.New(t)
			db.Exec(t, outboxDDL(tc.def))
			pgtest.AddClock(t, db, "outbox")
			cc, err := pgx.ParseConfig(db.URL)
			require.NoError(t, err)
			sink := &sliceSink[stamped]{}
			stop := start(t, processor.Config[stamped]{
				Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
				Source:       inordertype.Source{Table: "outbox"},
				Handler:      sink,
				PollInterval: 20 * time.Millisecond,
			})
			writers := []*writer{
				{key: "db-clock", stamp: "clock_timestamp()"},
				{key: "skewed", stamp: fmt.Sprintf("clock_timestamp() + interval '%d milliseconds'", tc.skew.Milliseconds())},
				{key: "stamp-then-insert", stamp: "clock_timestamp()", delay: 300 * time.Millisecond},
				{key: "calls-itself-pg_dump", begin: "SET LOCAL application_name = 'pg_dump'; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
					stamp: "now()", delay: 200 * time.Millisecond},
			}
			runWriters(ctx, t, db.Pool, writers, 2*time.Second)
			requireDeliveredOnceInOrder(t, sink, stop, writers, func(*writer) bool { return true })
		})
	}
}

// runWriters runs the writers at once for d.
func runWriters(ctx context.Context, t *testing.T, pool *pgxpool.Pool, writers []*writer, d time.Duration) {
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(ctx, t, pool, until) })
	}
	wg.Wait()
}

// requireDeliveredOnceInOrder waits until sink has every row the writers kept (by keep) committed, stops
// the processor, and requires them delivered once each, none else, in order per key.
func requireDeliveredOnceInOrder(t *testing.T, sink *sliceSink[stamped], stop func() error, writers []*writer, keep func(*writer) bool) {
	t.Helper()
	var want []int64
	for _, w := range writers {
		if keep(w) {
			want = append(want, w.committed...)
		}
	}
	slices.Sort(want)
	waitFor(t, "every committed row", func() bool { return len(sink.delivered()) >= len(want) })
	require.NoError(t, stop())
	got := sink.delivered()
	ids := make([]int64, len(got))
	last := map[string]int64{}
	for i, r := range got {
		ids[i] = r.ID
		require.Greater(t, r.ID, last[r.Key], "key %s out of order", r.Key)
		last[r.Key] = r.ID
	}
	slices.Sort(ids)
	require.Equal(t, want, ids, "delivered once each, none skipped")
}

// TestATableWithoutTheInsertClockIsRefused: a processor with the default settings refuses a table without
// the clock, in one line naming the command that adds it, and starts with the explicit opt-in.
func TestATableWithoutTheInsertClockIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT clock_timestamp()"))
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg := processor.Config[stamped]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "outbox"}, Handler: &sliceSink[stamped]{}, PollInterval: 20 * time.Millisecond,
	}
	p, err := processor.New(cfg)
	require.NoError(t, err)
	err = p.Run(context.Background())
	require.ErrorContains(t, err, "public.outbox has no insert clock")
	require.ErrorContains(t, err, "inorder migrate --table public.outbox")

	cfg.Source.Horizon = inordertype.HorizonWriters
	sink := &sliceSink[stamped]{}
	cfg.Handler = sink
	stop := start(t, cfg)
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('a')")
	waitFor(t, "the row, with the opt-in", func() bool { return len(sink.delivered()) == 1 })
	require.NoError(t, stop())
}

// TestADumpDoesNotHoldTheInsertClock: a real pg_dump held open, as a nightly dump is, holds a now()
// outbox under the transactions horizon for its whole length; with the insert clock, rows inserted during
// the dump are delivered while it still runs.
func TestADumpDoesNotHoldTheInsertClock(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT now()"))
	pgtest.AddClock(t, db, "outbox")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sink := &sliceSink[stamped]{}
	stop := start(t, processor.Config[stamped]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "outbox"}, Handler: sink, PollInterval: 20 * time.Millisecond,
	})
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('before')")
	waitFor(t, "the row before the dump", func() bool { return len(sink.delivered()) == 1 })
	dump := pgtest.HoldPgDump(t, db)
	for i := range 5 {
		db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ($1)", fmt.Sprint("during-", i))
	}
	waitFor(t, "the rows inserted during the dump", func() bool { return len(sink.delivered()) == 6 })
	require.True(t, dump.Running(t, db), "the dump still holds its snapshot: the rows did not wait for it")
	dump.End()
	require.NoError(t, stop())
}

// TestTakingUpTheClockDeliversAgainWhatItCouldPass: a process that read its table by created_at (as a
// release before the clock did, or the writers opt-in) and stands past the time the clock was added moves
// back to that time when it first reads by the clock, so that a row inserted since but dated by the
// application before its position is delivered, not passed.
func TestTakingUpTheClockDeliversAgainWhatItCouldPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT clock_timestamp()"))
	pgtest.AddClock(t, db, "outbox")
	// The clock's column and index stay, its trigger goes: the table reads as one without the clock, as
	// a release before the clock read it while the clock was added.
	var args string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT encode(tgargs, 'escape') FROM pg_trigger
		WHERE tgname = 'inorder_insert_clock'`).Scan(&args))
	db.Exec(t, "DROP TRIGGER inorder_insert_clock ON outbox")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sink := &sliceSink[stamped]{}
	cfg := processor.Config[stamped]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "outbox", Horizon: inordertype.HorizonWriters}, Handler: sink,
		PollInterval: 20 * time.Millisecond,
	}
	stop := start(t, cfg)
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('a')")
	waitFor(t, "the first row", func() bool { return len(sink.delivered()) == 1 })
	// Dated by the application an hour back: by created_at it lies behind the position.
	var late int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_id, created_at)
		VALUES ('late', clock_timestamp() - interval '1 hour') RETURNING id`).Scan(&late))
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('b')")
	waitFor(t, "the row after it", func() bool { return len(sink.delivered()) == 2 })
	require.NoError(t, stop())
	for _, r := range sink.delivered() {
		require.NotEqual(t, late, r.ID, "created_at passes it: what the clock is for")
	}

	db.Exec(t, fmt.Sprintf("CREATE TRIGGER inorder_insert_clock BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION inorder.insert_clock('%s')",
		strings.TrimSuffix(args, `\000`)))
	cfg.Source.Horizon = inordertype.HorizonAuto
	stop = start(t, cfg)
	waitFor(t, "the late row, by the clock", func() bool {
		for _, r := range sink.delivered() {
			if r.ID == late {
				return true
			}
		}
		return false
	})
	require.NoError(t, stop())
}

// TestALateRowIsCountedAndReported: with the writers opt-in, a row the application dates earlier than rows
// already delivered commits behind the position and is not delivered; it is counted in the cursor row,
// which status shows, not passed in silence.
func TestALateRowIsCountedAndReported(t *testing.T) {
	t.Parallel()
	defer processor.SetLateAfter(200 * time.Millisecond)()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT clock_timestamp()"))
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sink := &sliceSink[stamped]{}
	start(t, processor.Config[stamped]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "outbox", Horizon: inordertype.HorizonWriters}, Handler: sink,
		PollInterval: 20 * time.Millisecond,
	})
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('a'), ('a')")
	waitFor(t, "the first rows", func() bool { return len(sink.delivered()) == 2 })
	db.Exec(t, "INSERT INTO outbox (aggregate_id, created_at) VALUES ('late', clock_timestamp() - interval '1 minute')")
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('a')") // the stream goes on after it
	late := func() int64 {
		procs, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "relay"})
		require.NoError(t, err)
		require.Len(t, procs, 1)
		return procs[0].Info.LateRows
	}
	waitFor(t, "the late row counted", func() bool { return late() == 1 })
	require.Len(t, sink.delivered(), 3, "it was not delivered, and nothing else was missed")
	procs, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "relay"})
	require.NoError(t, err)
	out, err := json.Marshal(procs[0].Info)
	require.NoError(t, err)
	require.Contains(t, string(out), `"late":{"rows":1,"last_at":`)
}

// TestAColumnAddedToATableReadByTheClockAlone: a table with the clock whose (created_at, id) index was
// dropped, as the docs allow, goes on through a migration of its columns: inspected again by the clock, it
// needs no index but the clock's.
func TestAColumnAddedToATableReadByTheClockAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT clock_timestamp()"))
	pgtest.AddClock(t, db, "outbox")
	db.Exec(t, "DROP INDEX outbox_created_at_id_idx")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	got := make(chan handlers.Row, 10)
	start(t, processor.Config[handlers.Row]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "outbox"}, PollInterval: 20 * time.Millisecond,
		Handler: handlers.HandlerFunc[handlers.Row](func(_ context.Context, rec *handlers.Record[handlers.Row]) error {
			got <- rec.Value
			return nil
		}),
	})
	next := func(what string) handlers.Row {
		select {
		case row := <-got:
			return row
		case <-time.After(20 * time.Second):
			t.Fatalf("%s never came", what)
			return handlers.Row{}
		}
	}
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('a')")
	require.NotContains(t, next("the first row").Columns, "tenant")
	db.Exec(t, "ALTER TABLE outbox ADD COLUMN tenant text NOT NULL DEFAULT 'acme'")
	db.Exec(t, "INSERT INTO outbox (aggregate_id) VALUES ('b')")
	v, ok := next("the row after the migration").Get("tenant")
	require.True(t, ok, "the column added is delivered")
	require.Equal(t, "acme", v)
}
