package migrations_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
)

// clockState is what AddClock leaves on a table: whether its storage was rewritten (relfilenode), the
// trigger's argument, and its valid indexes on the clock.
type clockState struct {
	filenode uint32
	since    string
	indexes  []string
}

func readClock(t *testing.T, db *pgtest.DB, table string) clockState {
	t.Helper()
	var s clockState
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT c.relfilenode,
		       coalesce((SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = c.oid AND tgname = 'inorder_insert_clock'), ''),
		       coalesce((SELECT array_agg(indexrelid::regclass::text ORDER BY 1) FROM pg_index
		                 WHERE indrelid = c.oid AND indisvalid AND pg_get_indexdef(indexrelid) LIKE '%COALESCE(inorder_at%'), '{}')
		FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&s.filenode, &s.since, &s.indexes))
	return s
}

// TestAddClockIsOnline: the insert clock goes onto a table that writers keep inserting into without a
// rewrite; while a transaction holds the table, AddClock gives up each wait at its lock timeout, says who
// holds it, and lets the writers' inserts through meanwhile, and once the holder ends it is in place:
// every row inserted after it stamped by the database, whatever the insert said, the rows before it left
// alone, and a second run changes nothing.
func TestAddClockIsOnline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text);
		INSERT INTO outbox (created_at, note) SELECT clock_timestamp(), 'old' FROM generate_series(1, 20000)`)
	before := readClock(t, db, "outbox")

	// A writer inserts all along; each insert must go through while AddClock waits.
	var inserted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Pool.Exec(ctx, "INSERT INTO outbox (created_at, note) VALUES (clock_timestamp(), 'during')"); err != nil {
				t.Error(err)
				return
			}
			inserted.Add(1)
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })

	// A transaction that wrote to the table and stays open holds its lock until it ends.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "SET LOCAL application_name = 'slow_writer'; INSERT INTO outbox (created_at, note) VALUES (now(), 'held')")
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	waits := make(chan migrations.LockWait, 10)
	done := make(chan error, 1)
	go func() {
		done <- migrations.AddClock(ctx, conn, "outbox", migrations.ClockOpts{LockTimeout: 200 * time.Millisecond,
			WaitedFunc: func(w migrations.LockWait) { waits <- w }})
	}()
	w := <-waits
	require.Contains(t, strings.Join(w.Holders, "; "), "slow_writer", "the wait names who holds the table")
	// Between two attempts the writer's inserts go through: nothing queues behind a lock wait for long.
	at := inserted.Load()
	require.Eventually(t, func() bool { return inserted.Load() > at+10 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-done)

	after := readClock(t, db, "outbox")
	require.Equal(t, before.filenode, after.filenode, "the table was not rewritten")
	require.NotEmpty(t, after.since, "the trigger says when the clock was added")
	require.Equal(t, []string{"outbox_inorder_at_idx"}, after.indexes, "the index on the clock, built and valid")

	// An insert that writes the clock itself is stamped by the database all the same.
	var stamped, now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO outbox (created_at, inorder_at) VALUES ('2001-01-01', '2001-01-01')
		RETURNING inorder_at, clock_timestamp()`).Scan(&stamped, &now))
	require.WithinDuration(t, now, stamped, time.Second)
	var old int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE note = 'old' AND inorder_at IS NULL").Scan(&old))
	require.Equal(t, 20000, old, "the rows before the clock are left as they were")

	require.NoError(t, migrations.AddClock(ctx, conn, "outbox", migrations.ClockOpts{}))
	require.Equal(t, after, readClock(t, db, "outbox"), "a second run changes nothing")
}

// TestAddClockOnAPartitionedTable: the clock reaches every partition, one made later included, and the
// index is built on each partition and attached to the parent's, which is then valid.
func TestAddClockOnAPartitionedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE pout (id bigserial, created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at))
			PARTITION BY RANGE (created_at);
		CREATE TABLE pout_a PARTITION OF pout FOR VALUES FROM ('2000-01-01') TO ('2020-01-01');
		CREATE TABLE pout_b PARTITION OF pout FOR VALUES FROM ('2020-01-01') TO ('2100-01-01')`)
	pgtest.AddClock(t, db, "pout")
	require.Equal(t, []string{"pout_inorder_at_idx"}, readClock(t, db, "pout").indexes)
	require.Equal(t, []string{"pout_a_inorder_at_idx"}, readClock(t, db, "pout_a").indexes)
	db.Exec(t, "CREATE TABLE pout_c PARTITION OF pout FOR VALUES FROM ('2100-01-01') TO ('2200-01-01')")
	var at *time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "INSERT INTO pout_c (created_at) VALUES ('2150-01-01') RETURNING inorder_at").Scan(&at))
	require.NotNil(t, at, "a partition made later is stamped too")
	require.Len(t, readClock(t, db, "pout_c").indexes, 1, "and indexed")
}

// TestClockSQLPrintsWhatAddClockRuns: the printed statements, run by hand, give a table the clock.
func TestClockSQLPrintsWhatAddClockRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)`)
	script := migrations.ClockSQL("outbox", migrations.ClockOpts{})
	tx, index, ok := strings.Cut(script, "COMMIT;\n")
	require.True(t, ok, script)
	db.Exec(t, tx+"COMMIT;")
	db.Exec(t, strings.TrimSuffix(strings.TrimSpace(index), ";"))
	s := readClock(t, db, "outbox")
	require.NotEmpty(t, s.since)
	require.Equal(t, []string{"outbox_inorder_at_idx"}, s.indexes)
}
