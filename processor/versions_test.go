package processor_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// What differs between the PostgreSQL versions inorder supports (14 to 18): `make test-matrix` runs these,
// with the rest of the suites that touch SQL, on each of them. A test of something a version does not
// have skips on it.

// serverVersion is the server's version as server_version_num (170010 for 17.10).
func serverVersion(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&n))
	return n
}

func needVersion(t *testing.T, db *pgtest.DB, major int, what string) {
	t.Helper()
	if v := serverVersion(t, db); v < major*10000 {
		t.Skipf("%s needs PostgreSQL %d or later; the server is %d", what, major, v)
	}
}

// slow is a handler that takes a while over each record, as a payment API does, and keeps what it got.
type slow struct {
	delay time.Duration
	mu    sync.Mutex
	got   []int64
}

func (s *slow) Handle(ctx context.Context, rec *handlers.Record[event]) error {
	select {
	case <-time.After(s.delay): // the handler's own work, not a wait for the test
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.got = append(s.got, rec.Value.ID)
	s.mu.Unlock()
	return nil
}

func (s *slow) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// A DBA's transaction_timeout (17+) on the database is shorter than a batch: with --checkpoint batch, 100
// records of 50 ms each (5 s) in one cursor transaction against a timeout of 1 s. The cursor transactions
// turn it off for themselves (SET LOCAL), so the stream advances; before, every batch was ended before
// its commit and the same records were delivered again forever. Once on a dedicated connection, once on a
// Client's shared ones (another connection may serve each batch).
func TestATransactionTimeoutOnTheDatabaseDoesNotStopABatch(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "dedicated", true: "shared"}[shared], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			needVersion(t, b.db, 17, "transaction_timeout")
			b.db.Exec(t, fmt.Sprintf("ALTER DATABASE %s SET transaction_timeout = '1s'", pgx.Identifier{b.db.Name}.Sanitize()))
			// Every session from now on has it, the test's own included.
			conn, err := pgx.Connect(context.Background(), b.db.URL)
			require.NoError(t, err)
			var set string
			require.NoError(t, conn.QueryRow(context.Background(), "SHOW transaction_timeout").Scan(&set))
			require.NoError(t, conn.Close(context.Background()))
			require.Equal(t, "1s", set)

			ids := b.insert(t, 100)
			h := &slow{delay: 50 * time.Millisecond}
			cfg := b.cfg
			cfg.Handler = h
			cfg.Checkpoint = processor.CheckpointBatch
			cfg.BatchSize = 100
			if shared {
				client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, MaxConns: 3, Instance: "one"})
				require.NoError(t, err)
				t.Cleanup(client.Close)
				cfg.ClientConfig.ConnConfig, cfg.Client = nil, client
				p, err := processor.New(cfg)
				require.NoError(t, err)
				client.Add(p)
				testrun.Start(t, client.Run)
			} else {
				start(t, cfg)
			}
			last := idText(ids[len(ids)-1])
			require.Eventually(t, func() bool {
				_, id := b.position(t, cfg.Process)
				return id == last
			}, 60*time.Second, 10*time.Millisecond, "the position to reach the batch's last record")
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Equal(t, ids, h.got, "each record once, in order: no batch was ended and delivered again")
		})
	}
}

// On 18, ids made by uuidv7() (an id column `uuid DEFAULT uuidv7()`, time-ordered) work end to end: every
// row delivered once, in (created_at, id) order, with the id as the position, the rows of one statement
// (which may tie on created_at) included.
func TestUUIDv7IDsOn18(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	needVersion(t, db, 18, "uuidv7()")
	db.Exec(t, `
		CREATE TABLE orders (
			id         uuid PRIMARY KEY DEFAULT uuidv7(),
			customer   text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX orders_created_at_id_idx ON orders (created_at, id);`)
	pgtest.AddClock(t, db, "orders")
	type order struct {
		ID        string    `db:"id"`
		Customer  string    `db:"customer"`
		CreatedAt time.Time `db:"created_at"`
	}
	insert := func(n int) []string {
		rows, err := db.Pool.Query(context.Background(), `
			INSERT INTO orders (customer) SELECT 'c' || g FROM generate_series(1, $1) g RETURNING id::text`, n)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	var mu sync.Mutex
	var got []string
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg := processor.Config[order]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "uuidv7_orders",
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "orders"},
		BatchSize:    7,
		PollInterval: 20 * time.Millisecond,
		Handler: handlers.HandlerFunc[order](func(_ context.Context, rec *handlers.Record[order]) error {
			mu.Lock()
			got = append(got, rec.Value.ID)
			mu.Unlock()
			return nil
		}),
	}
	want := insert(20)
	start(t, cfg)
	for range 3 {
		want = append(want, insert(5)...)
	}
	// The order inorder promises is the insert clock's, then the id, read back from the table.
	rows, err := db.Pool.Query(context.Background(), "SELECT id::text FROM orders ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	ordered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, want, ordered)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(ordered)
	}, 20*time.Second, 5*time.Millisecond, "every order delivered")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, ordered, got, "every order once, in (created_at, id) order")
	var posID string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = $1", cfg.Process).Scan(&posID))
	require.Equal(t, ordered[len(ordered)-1], posID, "the position is the last uuid")
}

// A DBA's idle_session_timeout on the processor's role (every version inorder supports has it) ends the
// processor's session whenever it waits longer than that between batches: it cannot be overridden for a
// transaction (the session is idle outside one), so the processor reconnects, as after any cut, says in
// one log line which setting ended the session, and the stream goes on: every record once, in order.
func TestAnIdleSessionTimeoutIsNamedAndTheStreamGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role := restrictedRole(t, b, "events")
	b.db.Exec(t, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.parked TO %[1]s; "+
		"ALTER ROLE %[1]s SET idle_session_timeout = '200ms'", pgx.Identifier{role}.Sanitize()))
	var logs logBuffer
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig = b.cfg.ClientConfig.ConnConfig.Copy()
	cfg.ClientConfig.ConnConfig.User = role
	cfg.PollInterval = time.Second // idle for longer than the timeout between looks
	cfg.ProbeInterval = -1
	cfg.Logger = zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t)))
	want := b.insert(t, 5)
	start(t, cfg)
	waitFor(t, "the first records", func() bool { return b.h.count() >= len(want) })
	require.Eventually(t, func() bool { return logs.count("the server's idle_session_timeout") > 0 }, 20*time.Second,
		5*time.Millisecond, "a log line naming idle_session_timeout")
	want = append(want, b.insert(t, 5)...)
	waitFor(t, "the records after the reconnect", func() bool { return b.h.count() >= len(want) })
	require.Equal(t, want, b.h.ids(), "every record once, in order")
}
