package processor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// typed is a row of an outbox of typed events.
type typed struct {
	ID   int64  `db:"id"`
	Key  string `db:"aggregate_id"`
	Type string `db:"type"`
}

// filterBundle is an outbox of typed events, with created_at defaulting to now() and the insert clock.
type filterBundle struct {
	db *pgtest.DB
	cc *pgx.ConnConfig
}

func filterSetup(t *testing.T) filterBundle {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		type         text NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX ON outbox (created_at, id);`)
	pgtest.AddClock(t, db, "outbox")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return filterBundle{db: db, cc: cc}
}

func (b filterBundle) config(sink *sliceSink[typed], where string) processor.Config[typed] {
	return processor.Config[typed]{
		Process: "payments", ClientConfig: processor.ClientConfig{ConnConfig: b.cc}, StartFrom: inordertype.StartFromBeginning,
		Source:  inordertype.Source{Table: "outbox", Where: where},
		Handler: sink, PollInterval: 20 * time.Millisecond,
	}
}

// position is the durable position of the process.
func (b filterBundle) position(t *testing.T) (time.Time, string, bool) {
	t.Helper()
	var at *time.Time
	var id *string
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT position_created_at, position_id FROM inorder.position WHERE process_name = 'payments'").Scan(&at, &id)
	if err == pgx.ErrNoRows {
		return time.Time{}, "", false
	}
	require.NoError(t, err)
	var ts time.Time
	var s string
	if at != nil {
		ts = *at
	}
	if id != nil {
		s = *id
	}
	return ts, s, true
}

// TestAFilterDeliversExactlyTheRowsItKeeps: with a checkpoint per record and per batch, writers commit rows
// that match and rows that do not in the same transactions, some holding their transaction open a while after inserting (committing late), all
// taking the now() default of created_at: the process delivers exactly the matching rows, once each, in
// order per key, and passes over a tail of rows that do not match without a handler call, its position
// moving past them.
func TestAFilterDeliversExactlyTheRowsItKeeps(t *testing.T) {
	t.Parallel()
	for _, cp := range []processor.Checkpoint{processor.CheckpointRecord, processor.CheckpointBatch} {
		t.Run(string(cp), func(t *testing.T) {
			t.Parallel()
			testAFilterDeliversExactlyTheRowsItKeeps(t, cp)
		})
	}
}

func testAFilterDeliversExactlyTheRowsItKeeps(t *testing.T, cp processor.Checkpoint) {
	ctx := context.Background()
	b := filterSetup(t)
	sink := &sliceSink[typed]{}
	cfg := b.config(sink, "type LIKE 'payment.%'")
	cfg.Checkpoint = cp
	stop := start(t, cfg)

	type written struct {
		id  int64
		key string
	}
	var mu sync.Mutex
	var want []written
	until := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			key := fmt.Sprint("order-", w)
			for i := 0; time.Now().Before(until); i++ {
				tx, err := b.db.Pool.Begin(ctx)
				require.NoError(t, err)
				var mine []written
				for j, typ := range []string{"payment.captured", "order.placed", "payment.refunded", "shipment.sent"} {
					var id int64
					require.NoError(t, tx.QueryRow(ctx, "INSERT INTO outbox (aggregate_id, type) VALUES ($1, $2) RETURNING id",
						key, typ).Scan(&id))
					if strings.HasPrefix(typ, "payment.") {
						mine = append(mine, written{id, key})
					}
					if w%2 == 1 && j == 1 {
						time.Sleep(150 * time.Millisecond) // a late-committing writer
					}
				}
				require.NoError(t, tx.Commit(ctx))
				mu.Lock()
				want = append(want, mine...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitFor(t, "every matching row", func() bool { return len(sink.delivered()) >= len(want) })

	// A tail of rows the filter passes over: the position moves past them, with no handler call.
	var last time.Time
	for range 50 {
		require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO outbox (aggregate_id, type) VALUES ('x', 'order.placed') RETURNING inorder_at").Scan(&last))
	}
	waitFor(t, "the position past the rows passed over", func() bool {
		at, _, _ := b.position(t)
		return !at.Before(last)
	})
	require.NoError(t, stop())

	got := sink.delivered()
	require.Len(t, got, len(want), "exactly the matching rows, none twice")
	lastID := map[string]int64{}
	ids := make([]int64, len(got))
	for i, r := range got {
		require.True(t, strings.HasPrefix(r.Type, "payment."), "row %d (%s) does not match", r.ID, r.Type)
		require.Greater(t, r.ID, lastID[r.Key], "key %s out of order", r.Key)
		lastID[r.Key] = r.ID
		ids[i] = r.ID
	}
	wantIDs := make([]int64, len(want))
	for i, w := range want {
		wantIDs[i] = w.id
	}
	slices.Sort(ids)
	slices.Sort(wantIDs)
	require.Equal(t, wantIDs, ids)
	var handled int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT records_handled FROM inorder.cursor WHERE process_name = 'payments'").Scan(&handled))
	require.Equal(t, int64(len(want)), handled, "the rows passed over are no handled records")
}

// TestABadFilterRefusesToStart: a typo, a type error, a statement separator, a comment, a function that
// writes or whose result depends on when it runs, a subquery: each refuses to start in one line naming
// the filter, and the position of a process that ran before never moves.
func TestABadFilterRefusesToStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := filterSetup(t)
	b.db.Exec(t, `CREATE SEQUENCE s;
		CREATE TABLE audit (n int);
		CREATE FUNCTION writes(t text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO audit VALUES (1); RETURN true; END $$;
		CREATE FUNCTION lies(t text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT t LIKE ''payment.%''';`)
	b.db.Exec(t, "INSERT INTO outbox (aggregate_id, type) VALUES ('a', 'payment.captured'), ('a', 'order.placed')")

	// Never ran: no cursor row is left behind.
	for _, tc := range []struct{ name, where, says string }{
		{"typo", "tpye = 'payment.captured'", `column "tpye" does not exist`},
		{"type error", "type + 1 > 2", "operator does not exist"},
		{"not boolean", "type", "boolean"},
		{"separator", "true; DELETE FROM outbox", "statement separator"},
		{"separator in a comment", "true /* ; */", "comment"},
		{"comment", "true -- x", "comment"},
		{"escape from the parentheses", "true) OR (true", "closes a parenthesis"},
		{"dollar quoting", "type = $$x$$", "dollar sign"},
		{"volatile function", "nextval('s') > 0", "not IMMUTABLE"},
		{"function that writes", "writes(type)", "not IMMUTABLE"},
		{"time-dependent", "created_at > now() - interval '1 day'", "not IMMUTABLE"},
		{"subquery", "type IN (SELECT 'payment.captured')", "subquery"},
		{"writing subquery", "type IN (WITH d AS (DELETE FROM outbox RETURNING type) SELECT type FROM d)", "subquery"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := processor.New(b.config(&sliceSink[typed]{}, tc.where))
			require.NoError(t, err)
			err = p.Run(ctx)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.says)
			require.ErrorContains(t, err, fmt.Sprintf("%q", tc.where), "the line names the filter")
			require.NotContains(t, err.Error(), "\n", "one line")
			_, _, registered := b.position(t)
			require.False(t, registered, "no cursor row left behind")
		})
	}
	var audited int
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM audit").Scan(&audited))
	require.Zero(t, audited, "the function that writes never ran")

	// A function that claims to be IMMUTABLE is the filter its author vouches for.
	sink := &sliceSink[typed]{}
	stop := start(t, b.config(sink, "lies(type)"))
	waitFor(t, "the matching row", func() bool { return len(sink.delivered()) == 1 })
	require.NoError(t, stop())
	at, id, _ := b.position(t)

	// Ran: a bad filter, or another filter, leaves its position where it was.
	for _, where := range []string{"tpye = 'x'", "type LIKE 'order.%'", ""} {
		p, err := processor.New(b.config(&sliceSink[typed]{}, where))
		require.NoError(t, err)
		err = p.Run(ctx)
		require.Error(t, err, where)
		require.NotContains(t, err.Error(), "\n", "one line")
		if where != "tpye = 'x'" {
			require.ErrorContains(t, err, `taken with the filter "lies(type)"`)
		}
		at2, id2, _ := b.position(t)
		require.Equal(t, at, at2, "the position never moves")
		require.Equal(t, id, id2, "the position never moves")
	}
}

// TestAFilterUnderAHeldDump: a real pg_dump held open does not hold a process with a filter: rows that
// match, inserted during the dump beside rows that do not, are delivered while it still runs, and the
// position moves past the rows that do not.
func TestAFilterUnderAHeldDump(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := filterSetup(t)
	sink := &sliceSink[typed]{}
	stop := start(t, b.config(sink, "type LIKE 'payment.%'"))
	dump := pgtest.HoldPgDump(t, b.db)
	var last time.Time
	for i := range 5 {
		b.db.Exec(t, "INSERT INTO outbox (aggregate_id, type) VALUES ($1, 'payment.captured')", fmt.Sprint("k", i))
		require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO outbox (aggregate_id, type) VALUES ($1, 'order.placed') RETURNING inorder_at",
			fmt.Sprint("k", i)).Scan(&last))
	}
	waitFor(t, "the matching rows inserted during the dump", func() bool { return len(sink.delivered()) == 5 })
	waitFor(t, "the position past the rows passed over", func() bool {
		at, _, _ := b.position(t)
		return !at.Before(last)
	})
	require.True(t, dump.Running(t, b.db), "the dump still holds its snapshot: the rows did not wait for it")
	dump.End()
	require.NoError(t, stop())
	for _, r := range sink.delivered() {
		require.Equal(t, "payment.captured", r.Type)
	}
}

// TestAFilterUnderTheAdversarialWriters: the writers that stamp created_at themselves (a host 2s behind,
// an event stamped then inserted 0.3s later, one calling itself pg_dump) write into a table with the insert
// clock, and a process keeps the rows of all keys but one: it delivers exactly those, once each, in order
// per key.
func TestAFilterUnderTheAdversarialWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, outboxDDL("DEFAULT now()"))
	pgtest.AddClock(t, db, "outbox")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sink := &sliceSink[stamped]{}
	stop := start(t, processor.Config[stamped]{
		Process: "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source:  inordertype.Source{Table: "outbox", Where: "aggregate_id <> 'passed-over'"},
		Handler: sink, PollInterval: 20 * time.Millisecond,
	})
	writers := []*writer{
		{key: "db-clock", stamp: "clock_timestamp()"},
		{key: "passed-over", stamp: "clock_timestamp()"},
		{key: "skewed", stamp: "clock_timestamp() - interval '2 seconds'"},
		{key: "stamp-then-insert", stamp: "clock_timestamp()", delay: 300 * time.Millisecond},
		{key: "calls-itself-pg_dump", begin: "SET LOCAL application_name = 'pg_dump'; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
			stamp: "now()", delay: 200 * time.Millisecond},
	}
	runWriters(ctx, t, db.Pool, writers, 2*time.Second)
	requireDeliveredOnceInOrder(t, sink, stop, writers, func(w *writer) bool { return w.key != "passed-over" })
}

// TestAFilterWithoutItsIndexIsNamed: a process whose filter no partial index serves says, once at start,
// the statement that creates the one that does; with that index it says nothing of it.
func TestAFilterWithoutItsIndexIsNamed(t *testing.T) {
	t.Parallel()
	b := filterSetup(t)
	where := "type LIKE 'payment.%'"
	for _, indexed := range []bool{false, true} {
		var logs logBuffer
		cfg := b.config(&sliceSink[typed]{}, where)
		cfg.Logger = zerolog.New(&logs)
		stop := start(t, cfg)
		waitFor(t, "the source checked", func() bool { return logs.count("source checked") == 1 })
		require.NoError(t, stop())
		want := 1
		if indexed {
			want = 0
		}
		require.Equal(t, want, logs.count(`WHERE type LIKE 'payment.%'`), logs.buf.String())
		if !indexed {
			require.Equal(t, 1, logs.count(`CREATE INDEX CONCURRENTLY \"outbox_filter_idx\" ON \"public\".\"outbox\" ((coalesce(`), logs.buf.String())
			b.db.Exec(t, "CREATE INDEX outbox_filter_idx ON outbox ((coalesce(inorder_at, created_at)), id) WHERE "+where)
		}
	}
}
