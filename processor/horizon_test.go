package processor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// adversary runs writers against the events table the way real applications do, at their worst: each
// transaction locks an aggregate row, inserts 1 to 3 events with the aggregate's next sequence numbers
// (sometimes in one statement with a shared created_at), sometimes writes another table first, sometimes
// commits hundreds of milliseconds to over a second late, sometimes rolls back. With stamp set it writes
// created_at itself, as an ORM does: from a clock 2 s or 20 s behind or 2 s ahead of the database's, or the
// database's at the transaction's start and inserting up to 300 ms later, or the database's at the insert;
// and some of its transactions call themselves pg_dump.
type adversary struct {
	stamp      bool
	mu         sync.Mutex
	committed  map[int64]int // id -> aggregate index
	rolledBack map[int64]bool
	late       int
}

func runAdversary(t *testing.T, pool *pgxpool.Pool, writers, aggregates int, d time.Duration, stamp bool) *adversary {
	t.Helper()
	ctx := context.Background()
	adv := &adversary{stamp: stamp, committed: map[int64]int{}, rolledBack: map[int64]bool{}}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 42))
			for time.Now().Before(deadline) {
				require.NoError(t, adv.transaction(ctx, pool, rng, aggregates))
			}
		}(uint64(w))
	}
	wg.Wait()
	return adv
}

func (adv *adversary) transaction(ctx context.Context, pool *pgxpool.Pool, rng *rand.Rand, aggregates int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// stamp is the created_at the application writes, "" for the column's default.
	stamp := ""
	if adv.stamp {
		if rng.IntN(8) == 0 {
			if _, err := tx.Exec(ctx, "SET LOCAL application_name = 'pg_dump'"); err != nil {
				return err
			}
		}
		switch rng.IntN(5) {
		case 0:
			stamp = "clock_timestamp() - interval '2 seconds'"
		case 1:
			stamp = "clock_timestamp() - interval '20 seconds'"
		case 2:
			stamp = "clock_timestamp() + interval '2 seconds'"
		case 3:
			// Stamped as the event is built, inserted after the transaction's other work.
			if err := tx.QueryRow(ctx, "SELECT clock_timestamp()::text").Scan(&stamp); err != nil {
				return err
			}
			stamp = "'" + stamp + "'::timestamptz"
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		default:
			stamp = "clock_timestamp()"
		}
	}
	if rng.IntN(4) == 0 { // another table first: this transaction's xid is older than its events
		if _, err := tx.Exec(ctx, "INSERT INTO other (note) VALUES ('first')"); err != nil {
			return err
		}
	}
	agg := rng.IntN(aggregates)
	var seq int
	if err := tx.QueryRow(ctx, "SELECT seq FROM aggregates WHERE id = $1 FOR UPDATE", agg).Scan(&seq); err != nil {
		return err
	}
	n := 1 + rng.IntN(3)
	var ids []int64
	if n > 1 && rng.IntN(2) == 0 {
		// One statement, one shared created_at: ties that only the id orders.
		ts := "clock_timestamp()"
		if stamp != "" {
			ts = stamp
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO events (aggregate_id, seq, created_at)
			SELECT $1, $2 + g, ts FROM generate_series(1, $3) g, (SELECT `+ts+` AS ts) t
			RETURNING id`, fmt.Sprint(agg), seq, n)
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
	} else {
		insert := "INSERT INTO events (aggregate_id, seq) VALUES ($1, $2) RETURNING id"
		if stamp != "" {
			insert = "INSERT INTO events (aggregate_id, seq, created_at) VALUES ($1, $2, " + stamp + ") RETURNING id"
		}
		for i := 1; i <= n; i++ {
			var id int64
			if err := tx.QueryRow(ctx, insert, fmt.Sprint(agg), seq+i).Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
	if _, err := tx.Exec(ctx, "UPDATE aggregates SET seq = $2 WHERE id = $1", agg, seq+n); err != nil {
		return err
	}
	late := rng.IntN(12) == 0
	if late { // a slow commit: 200 ms to 1.2 s after the rows got their created_at
		time.Sleep(200*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond)
	}
	if rng.IntN(10) == 0 {
		adv.mu.Lock()
		for _, id := range ids {
			adv.rolledBack[id] = true
		}
		adv.mu.Unlock()
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	adv.mu.Lock()
	for _, id := range ids {
		adv.committed[id] = agg
	}
	if late {
		adv.late++
	}
	adv.mu.Unlock()
	return nil
}

// guardOnlyReader is the control: the read of the seed design (a keyset read below now() less an
// insert-latency guard), with ties already handled, but no writer tracking.
func guardOnlyReader(ctx context.Context, t *testing.T, url string, delivered func(id int64)) {
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var at time.Time
	var id int64
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, `
			SELECT id, created_at FROM events
			WHERE (created_at, id) > ($1, $2) AND created_at < clock_timestamp() - interval '5 milliseconds'
			ORDER BY created_at, id LIMIT 100`, at, id)
		if err != nil {
			return
		}
		n := 0
		for rows.Next() {
			require.NoError(t, rows.Scan(&id, &at))
			delivered(id)
			n++
		}
		rows.Close()
		if n == 0 {
			time.Sleep(20 * time.Millisecond) // the control's own poll interval
		}
	}
}

// TestNoRowIsSkippedUnderAdversarialWriters runs with both horizons: the writers horizon that a
// clock_timestamp() default gets, and the transactions horizon, which must be just as exact. It runs once
// more with four processes over the table on one Client, which take each other's polls of the
// transactions in flight (see pollshare.go): every one of them must get every row, in order.
func TestNoRowIsSkippedUnderAdversarialWriters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		horizon   inordertype.Horizon
		processes int
	}{
		{horizonName(inordertype.HorizonAuto), inordertype.HorizonAuto, 1},
		{horizonName(inordertype.HorizonTransactions), inordertype.HorizonTransactions, 1},
		{"shared polls", inordertype.HorizonAuto, 4},
		{"shared polls, transactions", inordertype.HorizonTransactions, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			noRowIsSkippedUnderAdversarialWriters(t, tc.horizon, tc.processes)
		})
	}
}

func horizonName(h inordertype.Horizon) string {
	if h == inordertype.HorizonAuto {
		return "auto"
	}
	return string(h)
}

func noRowIsSkippedUnderAdversarialWriters(t *testing.T, horizon inordertype.Horizon, processes int) {
	b := setup(t)
	if horizon != inordertype.HorizonAuto {
		b.dropClock(t) // the opt-in reads created_at
	}
	b.cfg.Source.Horizon = horizon
	const aggregates = 12
	b.db.Exec(t, `CREATE TABLE aggregates (id int PRIMARY KEY, seq int NOT NULL);
		INSERT INTO aggregates SELECT g, 0 FROM generate_series(0, 11) g;
		CREATE TABLE other (id bigserial PRIMARY KEY, note text)`)
	poolCfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	poolCfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
	require.NoError(t, err)
	defer pool.Close()

	b.cfg.Checkpoint = processor.CheckpointRecord
	b.cfg.BatchSize = 50
	collectors := []*collector{b.h}
	if processes == 1 {
		start(t, b.cfg)
	} else {
		client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig})
		require.NoError(t, err)
		t.Cleanup(client.Close)
		collectors = nil
		for i := range processes {
			cfg := b.cfg
			cfg.Process, cfg.Client, cfg.ClientConfig = fmt.Sprintf("shared_%d", i), client, processor.ClientConfig{}
			h := newCollector()
			cfg.Handler = h
			collectors = append(collectors, h)
			start(t, cfg)
		}
	}

	ctx, stopControl := context.WithCancel(context.Background())
	var controlMu sync.Mutex
	control := map[int64]int{}
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		guardOnlyReader(ctx, t, b.db.URL, func(id int64) { controlMu.Lock(); control[id]++; controlMu.Unlock() })
	}()

	// On the insert clock the application writes created_at itself, with every clock an application has.
	adv := runAdversary(t, pool, 8, aggregates, 6*time.Second, horizon == inordertype.HorizonAuto)
	require.Greater(t, adv.late, 3, "the workload must include late commits")
	require.NotEmpty(t, adv.rolledBack)

	// Every committed row arrives; then nothing more does.
	for _, h := range collectors {
		waitFor(t, "every committed row", func() bool { return h.count() >= len(adv.committed) })
	}
	var maxID int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `INSERT INTO events (aggregate_id, seq) VALUES ('end', 1) RETURNING id`).Scan(&maxID))
	for _, h := range collectors {
		waitFor(t, "the end marker", func() bool { ids := h.ids(); return len(ids) > 0 && ids[len(ids)-1] == maxID })
	}
	stopControl()
	<-controlDone

	var seen map[int64]bool
	for _, h := range collectors {
		got := h.records()
		got = got[:len(got)-1] // without the end marker
		seen = map[int64]bool{}
		lastSeq := map[string]int{}
		for _, rec := range got {
			id := rec.Value.ID
			require.False(t, seen[id], "record %d delivered twice", id)
			seen[id] = true
			require.False(t, adv.rolledBack[id], "rolled-back record %d delivered", id)
			_, ok := adv.committed[id]
			require.True(t, ok, "record %d delivered but never committed", id)
			require.Greater(t, rec.Value.Seq, lastSeq[rec.Value.AggregateID],
				"aggregate %s: seq %d delivered after %d", rec.Value.AggregateID, rec.Value.Seq, lastSeq[rec.Value.AggregateID])
			lastSeq[rec.Value.AggregateID] = rec.Value.Seq
		}
		require.Len(t, seen, len(adv.committed), "every committed row delivered exactly once")
	}

	// The control, on the very same workload, loses rows: the test can tell.
	controlMu.Lock()
	lost := 0
	for id := range adv.committed {
		if control[id] == 0 {
			lost++
		}
	}
	controlMu.Unlock()
	t.Logf("horizon %s: writes committed %d (late %d, rolled back rows %d); inorder delivered %d, lost 0; guard-only control lost %d (%.1f%%)",
		horizonName(horizon), len(adv.committed), adv.late, len(adv.rolledBack), len(seen), lost, 100*float64(lost)/float64(len(adv.committed)))
	require.Greater(t, lost, 0, "the guard-only control should lose rows on this workload")
}

// TestAnOpenWriterStallsTheStreamVisiblyAndItsRowsArriveInOrder holds a writer transaction open after it
// wrote a row, while later rows commit. The stream must stall behind it, status must name it, and once it
// commits everything must arrive in order. It runs for each way of writing (INSERT, COPY, a partitioned
// table through its parent or straight into a partition), with the processor connected as a role that
// may only read the source and its own tables.
func TestAnOpenWriterStallsTheStreamVisiblyAndItsRowsArriveInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ddl   string
		table string
		write func(ctx context.Context, tx pgx.Tx) (int64, error)
	}{
		{name: "insert", write: func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('slow', 1) RETURNING id").Scan(&id)
			return id, err
		}},
		{name: "copy", write: func(ctx context.Context, tx pgx.Tx) (int64, error) {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, []string{"aggregate_id", "seq"},
				pgx.CopyFromRows([][]any{{"slow", 1}})); err != nil {
				return 0, err
			}
			var id int64
			err := tx.QueryRow(ctx, "SELECT max(id) FROM events").Scan(&id)
			return id, err
		}},
		{name: "partitioned through the parent", table: "pevents", ddl: partitionedDDL,
			write: func(ctx context.Context, tx pgx.Tx) (int64, error) {
				var id int64
				err := tx.QueryRow(ctx, "INSERT INTO pevents (aggregate_id, seq) VALUES ('slow', 1) RETURNING id").Scan(&id)
				return id, err
			}},
		{name: "partitioned straight into a partition", table: "pevents", ddl: partitionedDDL,
			write: func(ctx context.Context, tx pgx.Tx) (int64, error) {
				var id int64
				err := tx.QueryRow(ctx, "INSERT INTO pevents_now (aggregate_id, seq) VALUES ('slow', 1) RETURNING id").Scan(&id)
				return id, err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			table := "events"
			if tc.ddl != "" {
				b.db.Exec(t, tc.ddl)
				pgtest.AddClock(t, b.db, tc.table)
				table = tc.table
				b.cfg.Source.Table = table
			}
			b.cfg.ClientConfig.ConnConfig.User = restrictedRole(t, b, table)
			ctx := context.Background()
			insert := func(n int) []int64 {
				rows, err := b.db.Pool.Query(ctx, fmt.Sprintf(`INSERT INTO %s (aggregate_id, seq)
					SELECT 'a', g FROM generate_series(1, $1) g RETURNING id`, table), n)
				require.NoError(t, err)
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				require.NoError(t, err)
				return ids
			}
			before := insert(3)
			start(t, b.cfg)
			waitFor(t, "the rows before the writer", func() bool { return b.h.count() == 3 })

			slow, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer slow.Rollback(ctx) //nolint:errcheck
			var slowPID int32
			require.NoError(t, slow.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&slowPID))
			slowID, err := tc.write(ctx, slow)
			require.NoError(t, err)
			after := insert(4) // committed at once, but created after the slow writer's row

			waitFor(t, "status to name the holder", func() bool {
				conn, err := b.db.Pool.Acquire(ctx)
				require.NoError(t, err)
				defer conn.Release()
				procs, err := cursor.Read(ctx, conn.Conn(), cursor.ReadOpts{Process: b.cfg.Process})
				require.NoError(t, err)
				return len(procs) == 1 && procs[0].Info.HeldByPID == int(slowPID)
			})
			require.Equal(t, before, b.h.ids(), "nothing after the open writer's row is delivered while it is open")

			require.NoError(t, slow.Commit(ctx))
			want := append(append(append([]int64{}, before...), slowID), after...)
			waitFor(t, "everything after the commit", func() bool { return b.h.count() == len(want) })
			require.Equal(t, want, b.h.ids())
			waitFor(t, "the hold to clear", func() bool {
				var pid *int32
				require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT held_by_pid FROM inorder.cursor WHERE process_name = $1", b.cfg.Process).Scan(&pid))
				return pid == nil
			})
		})
	}
}

const partitionedDDL = `
	CREATE TABLE pevents (
		id           bigserial,
		aggregate_id text NOT NULL,
		seq          integer NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
		PRIMARY KEY (id, created_at)
	) PARTITION BY RANGE (created_at);
	CREATE TABLE pevents_old PARTITION OF pevents FOR VALUES FROM ('2000-01-01') TO ('2020-01-01');
	CREATE TABLE pevents_now PARTITION OF pevents FOR VALUES FROM ('2020-01-01') TO ('2100-01-01');
	CREATE INDEX ON pevents (created_at, id);`

// restrictedRole creates a login role that may read table and use inorder's own tables, nothing more:
// no superuser, no pg_read_all_stats. It returns the role's name.
func restrictedRole(t *testing.T, b *bundle, table string) string {
	t.Helper()
	role := b.db.Name + "_reader"
	b.db.Exec(t, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN NOSUPERUSER;
		GRANT SELECT ON %[2]s TO %[1]s;
		GRANT USAGE ON SCHEMA inorder TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON inorder.cursor TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.instance TO %[1]s;
		GRANT SELECT, INSERT, TRUNCATE ON inorder.checkpoint, inorder.checkpoint_0, inorder.checkpoint_1, inorder.checkpoint_2 TO %[1]s;
		GRANT USAGE ON SEQUENCE inorder.checkpoint_seq TO %[1]s;
		GRANT SELECT ON inorder.position TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.source_state TO %[1]s`,
		pgx.Identifier{role}.Sanitize(), pgx.Identifier{table}.Sanitize()))
	return role
}

// holdObserver keeps the longest hold of the horizon a poll reported (Observer.Hold).
type holdObserver struct {
	nopObserver
	longest atomic.Int64
}

func (o *holdObserver) Hold(_ string, d time.Duration) {
	if int64(d) > o.longest.Load() {
		o.longest.Store(int64(d))
	}
}

// TestRowsHeldBehindAShortWriterGoOnSoonAfterItEnds: a writer holds its transaction open for a moment after
// its insert, as a commit waiting for a busy disk's flush does, while another row commits behind it. The
// stream waits for the writer, and once it ends looks again after about as long as the hold had lasted,
// not a whole poll interval later (an hour here, so a lease's third: twenty seconds).
func TestRowsHeldBehindAShortWriterGoOnSoonAfterItEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holds := &holdObserver{}
	b.cfg.PollInterval, b.cfg.Lease, b.cfg.Observer = time.Hour, time.Minute, holds
	first := b.insert(t, 1)
	start(t, b.cfg)
	waitFor(t, "the first row", func() bool { return b.h.count() == 1 })

	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	var held int64
	require.NoError(t, tx.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('held', 1) RETURNING id").Scan(&held))
	behind := b.insert(t, 1)
	// The stream is held by the writer for a while (the probe is no use then: it would see rows the horizon
	// holds), and the row behind it stays back.
	waitFor(t, "a poll that found the writer holding the horizon for 10 ms", func() bool {
		return time.Duration(holds.longest.Load()) >= 10*time.Millisecond
	})
	require.Equal(t, first, b.h.ids())
	require.NoError(t, tx.Commit(ctx))
	ended := time.Now()
	within := testrun.EventuallyWithin(5 * time.Second)
	within(t, "the rows behind the writer", func() bool { return b.h.count() == 3 })
	t.Logf("delivered %s after the writer's commit", time.Since(ended).Round(time.Millisecond))
	require.Equal(t, append(append(first, held), behind...), b.h.ids())
}
