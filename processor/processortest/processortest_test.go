package processortest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// booking is a row of the test source.
type booking struct {
	ID       int64  `db:"id"`
	Customer string `db:"customer"`
	Seats    int    `db:"seats"`
}

const bookingsDDL = `
	CREATE TABLE bookings (
		id         bigserial PRIMARY KEY,
		customer   text NOT NULL,
		seats      int NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON bookings (created_at, id);`

// addClock gives table inorder's insert clock, as `inorder migrate --table` does.
func addClock(t *testing.T, db *processortest.DB, table string) {
	t.Helper()
	pgtest.AddClock(t, &pgtest.DB{Name: db.Name, URL: db.URL, Pool: db.Pool}, table)
}

// book inserts n bookings.
func book(t *testing.T, db *processortest.DB, n int) {
	t.Helper()
	db.Exec(t, "INSERT INTO bookings (customer, seats) SELECT 'c' || g, g FROM generate_series(1, $1) g", n)
}

// newProcessor returns a processor named process on db that delivers bookings to h, with short timings.
func newProcessor(t *testing.T, db *processortest.DB, process string, h handlers.Handler[booking]) *processor.Processor[booking] {
	t.Helper()
	p, err := processor.New(processor.Config[booking]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: db.ConnConfig(t)},
		Source:       inordertype.Source{Table: "bookings"},
		Handler:      h,
		PollInterval: 10 * time.Millisecond,
		RetryMin:     10 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
	})
	require.NoError(t, err)
	return p
}

func ids(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

func TestNewDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	db := processortest.NewDB(t, nil)
	var migrated bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regclass('inorder.cursor') IS NOT NULL").Scan(&migrated))
	require.True(t, migrated, "the migrations are applied")
	var current string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&current))
	require.Equal(t, db.Name, current)
	require.Equal(t, db.Name, db.ConnConfig(t).Database)

	empty := processortest.NewDB(t, &processortest.DBOpts{Empty: true})
	require.NotEqual(t, db.Name, empty.Name, "each call gets a database of its own")
	require.NoError(t, empty.Pool.QueryRow(ctx, "SELECT to_regclass('inorder.cursor') IS NOT NULL").Scan(&migrated))
	require.False(t, migrated, "an Empty database has nothing in it")

	db.Exec(t, bookingsDDL)
	f := &fakeT{}
	inGoroutine(func() { db.Exec(f, "SELECT * FROM nowhere") })
	require.Contains(t, f.fatalMsg(), "nowhere")
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rec processortest.Recorder[booking]
	var wg sync.WaitGroup
	for w := range 4 { // concurrent callers, for the race detector
		wg.Go(func() {
			for i := range 25 {
				_ = rec.Handle(ctx, &handlers.Record[booking]{ID: fmt.Sprintf("%d-%d", w, i)})
				_, _, _ = rec.Len(), rec.IDs(), rec.Values()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 100, rec.Len())

	rec = processortest.Recorder[booking]{}
	boom := errors.New("boom")
	rec.Fail("2", boom)
	require.NoError(t, rec.Handle(ctx, &handlers.Record[booking]{ID: "1", Value: booking{ID: 1}}))
	require.ErrorIs(t, rec.Handle(ctx, &handlers.Record[booking]{ID: "2", Value: booking{ID: 2}}), boom)
	require.ErrorIs(t, rec.Handle(ctx, &handlers.Record[booking]{ID: "2", Value: booking{ID: 2}}), boom)
	rec.Fail("2", nil)
	require.NoError(t, rec.Handle(ctx, &handlers.Record[booking]{ID: "2", Value: booking{ID: 2}}))
	require.Equal(t, []string{"1", "2"}, rec.IDs(), "a failed record is not kept")
	require.Equal(t, []booking{{ID: 1}, {ID: 2}}, rec.Values())
	require.Len(t, rec.Records(), 2)
	require.Equal(t, 3, rec.Attempts("2"))
	require.Equal(t, 0, rec.Attempts("3"))
}

// TestRunCatchUpHaltAndRecover runs a processor with Start, waits for it to catch up, makes it halt on a
// record and lets it recover, as a user's test of a handler would.
func TestRunCatchUpHaltAndRecover(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)
	db.Exec(t, bookingsDDL)
	addClock(t, db, "bookings")
	book(t, db, 3)
	rec := &processortest.Recorder[booking]{}
	run := processortest.Start(t, newProcessor(t, db, "sms", rec), nil)

	processortest.WaitCaughtUp(t, db, "sms", nil)
	require.Equal(t, ids(1, 3), rec.IDs())
	require.Equal(t, "c2", rec.Values()[1].Customer)

	rec.Fail("5", handlers.Permanent(errors.New("no such phone number")))
	book(t, db, 3)
	halt := processortest.WaitHalted(t, db, "sms", nil)
	require.Equal(t, "5", halt.RecordID)
	require.Contains(t, halt.Error, "no such phone number")
	require.GreaterOrEqual(t, halt.Attempts, 1)
	require.Equal(t, ids(1, 4), rec.IDs(), "nothing after the halted record is delivered")

	rec.Fail("5", nil)
	processortest.WaitCaughtUp(t, db, "sms", nil)
	require.Equal(t, ids(1, 6), rec.IDs())
	require.NoError(t, run.Stop())
	require.NoError(t, run.Stop(), "Stop may be called again")
	select {
	case <-run.Done():
	default:
		t.Fatal("Done is closed once Run has returned")
	}
}

// TestWaitCaughtUpPartitioned waits on a partitioned process: caught up only when every partition is.
func TestWaitCaughtUpPartitioned(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)
	db.Exec(t, `
		CREATE TABLE events (
			id           bigserial PRIMARY KEY,
			aggregate_id text NOT NULL,
			created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX ON events (created_at, id);`)
	addClock(t, db, "events")
	db.Exec(t, source.PartitionIndexSQL("events", "aggregate_id", source.ClockAtExpr("created_at"), "id", 3))
	db.Exec(t, "INSERT INTO events (aggregate_id) SELECT 'agg-' || (g % 10) FROM generate_series(1, 200) g")
	type event struct {
		ID          int64  `db:"id"`
		AggregateID string `db:"aggregate_id"`
	}
	rec := &processortest.Recorder[event]{}
	p, err := processor.NewPartitioned(processor.Config[event]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "fanout",
		ClientConfig: processor.ClientConfig{ConnConfig: db.ConnConfig(t)},
		Source:       inordertype.Source{Table: "events"},
		Handler:      rec,
		PollInterval: 10 * time.Millisecond,
	}, processor.PartitionOpts{Partitions: 3})
	require.NoError(t, err)
	processortest.Start(t, p, nil)

	processortest.WaitCaughtUp(t, db, "fanout", nil)
	require.Equal(t, 200, rec.Len(), "caught up means every partition delivered everything")
	db.Exec(t, "INSERT INTO events (aggregate_id) SELECT 'agg-' || (g % 10) FROM generate_series(1, 30) g")
	processortest.WaitCaughtUp(t, db, "fanout", nil)
	require.Equal(t, 230, rec.Len())
}

// TestWaitFailsNamingTheProcess checks the messages of waits that time out.
func TestWaitFailsNamingTheProcess(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)
	db.Exec(t, bookingsDDL)
	addClock(t, db, "bookings")
	book(t, db, 2)
	short := &processortest.WaitOpts{Timeout: 100 * time.Millisecond}

	f := &fakeT{}
	inGoroutine(func() { processortest.WaitCaughtUp(f, db, "never_started", short) })
	require.Equal(t, `processortest: process "never_started" did not catch up within 100ms: `+
		"it has no cursor row: it never started", f.fatalMsg())

	rec := &processortest.Recorder[booking]{}
	rec.Fail("2", errors.New("sink down"))
	processortest.Start(t, newProcessor(t, db, "stuck", rec), nil)
	processortest.WaitFailing(t, db, "stuck", nil)
	f = &fakeT{}
	inGoroutine(func() { processortest.WaitCaughtUp(f, db, "stuck", short) })
	require.Contains(t, f.fatalMsg(), `process "stuck" did not catch up within 100ms: position `)
	require.Contains(t, f.fatalMsg(), "/1, 1 rows behind, retrying record 2 after ")
	require.Contains(t, f.fatalMsg(), "sink down")

	rec.Fail("2", nil)
	processortest.WaitCaughtUp(t, db, "stuck", nil)
	f = &fakeT{}
	inGoroutine(func() { processortest.WaitHalted(f, db, "stuck", short) })
	require.Regexp(t, `^processortest: process "stuck" did not halt within 100ms: position \S+/2$`, f.fatalMsg())
}

// TestStartFailsOnRunError checks that a run that fails on its own fails the test at once, and that Stop
// reports a run that does not stop.
func TestStartFailsOnRunError(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)

	// A processor whose source does not exist fails at start-up.
	f := &fakeT{}
	run := processortest.Start(f, newProcessor(t, db, "no_table", &processortest.Recorder[booking]{}), nil)
	<-run.Done()
	require.Len(t, f.Errors(), 1)
	require.Contains(t, f.Errors()[0], `processortest: process "no_table": Run returned before it was stopped: `)
	require.Contains(t, f.Errors()[0], "bookings")
	require.ErrorContains(t, run.Stop(), `process "no_table": `)
	f.cleanup()
	require.Len(t, f.Errors(), 1, "the cleanup does not report the error again")

	// A run that ignores its context.
	release := make(chan struct{})
	defer close(release)
	f = &fakeT{}
	run = processortest.Start(f, processortest.RunFunc(func(context.Context) error { <-release; return nil }),
		&processortest.StartOpts{Name: "deaf", StopTimeout: 50 * time.Millisecond})
	require.EqualError(t, run.Stop(), "deaf: Run did not return within 50ms of being stopped")
	f.cleanup()
	require.Empty(t, f.Errors(), "the test took the error from Stop")

	// A run stopped by the cleanup whose error nobody took fails the test there.
	f = &fakeT{}
	processortest.Start(f, processortest.RunFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("unclean stop")
	}), nil)
	f.cleanup()
	require.Equal(t, []string{"processortest: runner: unclean stop"}, f.Errors())
}
