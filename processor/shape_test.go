package processor_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

const shapeOutboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		n            integer NOT NULL,
		payload      json DEFAULT '{"n":1}',
		note         text,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX outbox_created_at_id_idx ON outbox (created_at, id);`

// rowSink records the generic records it is handed.
type rowSink struct {
	mu   sync.Mutex
	got  map[int64]handlers.Row
	ids  []int64
	seen map[int64]int
}

func (s *rowSink) Handle(_ context.Context, rec *handlers.Record[handlers.Row]) error {
	id, err := strconv.ParseInt(rec.ID, 10, 64)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[id] = rec.Value
	s.ids = append(s.ids, id)
	s.seen[id]++
	return nil
}

// has reports whether the record id was delivered.
func (s *rowSink) has(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id] > 0
}

// delivered returns the ids delivered, in order, and the records by id.
func (s *rowSink) delivered() ([]int64, map[int64]handlers.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := make(map[int64]handlers.Row, len(s.got))
	for id, r := range s.got {
		got[id] = r
	}
	return append([]int64(nil), s.ids...), got
}

// outboxBundle is a database with an outbox table, writers inserting into it, and a processor
// configuration of generic records delivering to a rowSink.
type outboxBundle struct {
	db   *pgtest.DB
	cfg  processor.Config[handlers.Row]
	sink *rowSink
}

func setupOutbox(t *testing.T) *outboxBundle {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, shapeOutboxDDL)
	pgtest.AddClock(t, db, "outbox")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sink := &rowSink{got: map[int64]handlers.Row{}, seen: map[int64]int{}}
	return &outboxBundle{db: db, sink: sink, cfg: processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "outbox_process",
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "outbox"},
		Handler:      sink,
		BatchSize:    20,
		PollInterval: 20 * time.Millisecond,
		RetryMin:     20 * time.Millisecond,
		RetryMax:     100 * time.Millisecond,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel),
	}}
}

// write inserts rows into the outbox, one statement each, until the test stops it; stop waits for the
// writer to end.
func (b *outboxBundle) write(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			_, err := b.db.Pool.Exec(ctx, "INSERT INTO outbox (aggregate_id, n) VALUES ($1, $2)",
				fmt.Sprint("a", i%4), i)
			if err != nil && ctx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond) // a steady trickle, not a flood
		}
	}()
	return func() { cancel(); <-done }
}

// migrate runs a migration the careful way, with lock_timeout 2s, and returns the id of a row inserted
// right after it: every row from that id on was inserted after the migration committed.
func (b *outboxBundle) migrate(t *testing.T, ddl string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SET lock_timeout = '2s'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, ddl)
	require.NoError(t, err)
	return b.mark(t)
}

// migrateUnderRead runs a migration in a transaction that locks the outbox first and commits only once a
// read of the stream waits for that lock: the read was built, and its poll made, before the migration,
// which it then meets. It returns the id of a row inserted right after.
func (b *outboxBundle) migrateUnderRead(t *testing.T, ddl string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	for _, sql := range []string{"SET LOCAL lock_timeout = '2s'", "LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE", ddl} {
		_, err := tx.Exec(ctx, sql)
		require.NoError(t, err)
	}
	waitFor(t, "a read to wait for the migration", func() bool {
		var waiting bool
		// The processor's cursor connection, on which it reads (the probe has one of its own).
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name LIKE 'inorder:' || $1 || '@%')`, b.cfg.Process).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Commit(ctx))
	return b.mark(t)
}

// mark inserts a row and returns its id.
func (b *outboxBundle) mark(t *testing.T) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`INSERT INTO outbox (aggregate_id, n) VALUES ('mark', 0) RETURNING id`).Scan(&id))
	return id
}

// allDelivered waits for the row id, then requires every row of the outbox to have been delivered exactly
// once, in the order of the table's insert clock.
func (b *outboxBundle) allDelivered(t *testing.T, id int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("row %d", id), func() bool { return b.sink.has(id) })
	// Every row up to it by the clock, which the stream has delivered before it.
	rows, err := b.db.Pool.Query(context.Background(), `SELECT id FROM outbox
		WHERE (coalesce(inorder_at, created_at), id) <= (SELECT coalesce(inorder_at, created_at), id FROM outbox WHERE id = $1)
		ORDER BY coalesce(inorder_at, created_at), id`, id)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	got, _ := b.sink.delivered()
	require.Equal(t, want, got[:len(want)], "every row once, in order")
}

// TestTheStreamLivesThroughMigrationsOfItsOutbox migrates the outbox of a process that delivers all its
// columns while writers insert: a column added reaches the sink within a batch, a column dropped leaves
// the records without a record lost, a change of type is read as the column now is, and VACUUM FULL
// changes nothing. The process never stops.
func TestTheStreamLivesThroughMigrationsOfItsOutbox(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	stop := start(t, b.cfg)
	stopWriting := b.write(t)
	defer func() { stopWriting() }()
	b.allDelivered(t, b.mark(t))

	from := b.migrate(t, "ALTER TABLE outbox ADD COLUMN tenant text NOT NULL DEFAULT 'acme'")
	b.allDelivered(t, from)
	after := func(from int64, check func(handlers.Row)) {
		b.allDelivered(t, b.mark(t))
		ids, got := b.sink.delivered()
		n := 0
		for _, id := range ids {
			if id >= from {
				check(got[id])
				n++
			}
		}
		require.Positive(t, n)
	}
	after(from, func(r handlers.Row) {
		tenant, ok := r.Get("tenant")
		require.True(t, ok, "a record inserted after ADD COLUMN carries it: %v", r.Columns)
		require.Equal(t, "acme", tenant)
	})

	// A writer waiting for the migration's lock would hold the horizon, and no read would come to meet it.
	stopWriting()
	from = b.migrateUnderRead(t, "ALTER TABLE outbox DROP COLUMN note") // the read meets it: refused, read again
	stopWriting = b.write(t)
	after(from, func(r handlers.Row) {
		_, ok := r.Get("note")
		require.False(t, ok, "a record inserted after DROP COLUMN lacks it: %v", r.Columns)
	})

	from = b.migrate(t, "ALTER TABLE outbox ALTER COLUMN n TYPE bigint, ALTER COLUMN payload TYPE jsonb")
	after(from, func(r handlers.Row) {
		n, _ := r.Get("n")
		require.IsType(t, int64(0), n, "n is a bigint now")
		if p, _ := r.Get("payload"); p != nil {
			require.Equal(t, json.RawMessage(`{"n": 1}`), p, "payload is jsonb now (as jsonb prints it)")
		}
	})

	b.migrate(t, "VACUUM FULL outbox")
	stopWriting()
	b.allDelivered(t, b.mark(t))
	require.NoError(t, stop())
}

// TestPgRepackOfTheOutbox rebuilds the outbox with pg_repack while writers insert and the stream runs.
func TestPgRepackOfTheOutbox(t *testing.T) {
	t.Parallel()
	repack, err := exec.LookPath("pg_repack")
	if err != nil {
		t.Skip("pg_repack is not installed (Debian: postgresql-15-repack)")
	}
	b := setupOutbox(t)
	if _, err := b.db.Pool.Exec(context.Background(), "CREATE EXTENSION pg_repack"); err != nil {
		t.Skipf("the server has no pg_repack extension: %v", err)
	}
	stop := start(t, b.cfg)
	stopWriting := b.write(t)
	defer stopWriting()
	b.allDelivered(t, b.mark(t))
	cc := b.cfg.ClientConfig.ConnConfig
	cmd := exec.Command(repack, "--wait-timeout=2", "--host="+cc.Host, "--port="+strconv.Itoa(int(cc.Port)),
		"--username="+cc.User, "--dbname="+cc.Database, "--table=outbox")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+cc.Password)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b.allDelivered(t, b.mark(t))
	stopWriting()
	b.allDelivered(t, b.mark(t))
	require.NoError(t, stop())
}

// sourceObserver records what the processor says of its source's fit.
type sourceObserver struct {
	nopObserver
	mu      sync.Mutex
	column  string
	waiting bool
}

func (o *sourceObserver) SourceWaiting(_ string, column string, waiting bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.column, o.waiting = column, waiting
}

func (o *sourceObserver) now() (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.column, o.waiting
}

// TestANeededColumnGoneMakesTheStreamWaitUntilItIsBack renames, then drops, a column the process selects,
// while writers insert: the stream waits without halting, skipping or exiting, the observer and the cursor
// row name the column and what to do, and it reads on by itself once the column is back.
func TestANeededColumnGoneMakesTheStreamWaitUntilItIsBack(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	b.cfg.Source.Columns = []string{"id", "aggregate_id", "payload", "created_at"}
	obs := &sourceObserver{}
	b.cfg.Observer = obs
	stop := start(t, b.cfg)
	stopWriting := b.write(t)
	defer stopWriting()
	b.allDelivered(t, b.mark(t))

	status := func() cursor.Info {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		require.NoError(t, err)
		require.Len(t, procs, 1)
		return procs[0].Info
	}
	said := func() string { return status().SourceWait }
	waits := func(fix string) int64 {
		waitFor(t, "the stream to wait for payload", func() bool { c, w := obs.now(); return w && c == "payload" })
		waitFor(t, "status to say so", func() bool { return said() != "" })
		require.Contains(t, said(), "column public.outbox.payload, a column the process selects (Source.Columns, --columns), is gone")
		require.Contains(t, said(), fix)
		require.Equal(t, cursor.StatusSourceChanged, status().Status)
		held := b.mark(t)
		time.Sleep(100 * time.Millisecond) // five poll intervals: nothing may be delivered while it waits
		require.False(t, b.sink.has(held), "nothing is read while the column is gone")
		return held
	}
	reads := func(held int64) {
		b.allDelivered(t, held)
		_, w := obs.now()
		require.False(t, w)
		waitFor(t, "status to say it reads again", func() bool { return said() == "" })
		require.NotEqual(t, cursor.StatusSourceChanged, status().Status)
	}

	b.migrate(t, "ALTER TABLE outbox RENAME COLUMN payload TO body")
	held := waits(`it was renamed to "body": rename it back (ALTER TABLE "public"."outbox" RENAME COLUMN "body" TO "payload")`)
	b.migrate(t, "ALTER TABLE outbox RENAME COLUMN body TO payload")
	reads(held)

	b.migrate(t, "ALTER TABLE outbox DROP COLUMN payload")
	held = waits(`add it back (ALTER TABLE "public"."outbox" ADD COLUMN "payload" ...)`)
	b.migrate(t, "ALTER TABLE outbox ADD COLUMN payload json")
	reads(held)

	stopWriting()
	b.allDelivered(t, b.mark(t))
	require.NoError(t, stop())
}

// TestATimePartitionedOutboxWithPartitionsCreatedAndDropped runs a stream over an outbox partitioned by
// time, a partition a second, while a maintainer creates partitions ahead and detaches and drops the ones
// delivered, with lock_timeout 2s as a careful migration would, and two writers insert: one through the
// parent, one straight into the partition of the moment, in transactions that commit a little late. Every
// row arrives once, in order, and no statement of the maintainer waits out its lock timeout.
func TestATimePartitionedOutboxWithPartitionsCreatedAndDropped(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	b.db.Exec(t, `CREATE TABLE tpoutbox (
			id           bigserial,
			aggregate_id text NOT NULL,
			n            integer NOT NULL,
			created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
			PRIMARY KEY (id, created_at)
		) PARTITION BY RANGE (created_at);
		CREATE INDEX ON tpoutbox (created_at, id);
		-- Inserts into the partition of the moment, as an application that names partitions does.
		CREATE FUNCTION insert_into_partition(a text, n int, OUT id bigint, OUT created_at timestamptz) LANGUAGE plpgsql AS $$
		BEGIN
			EXECUTE format('INSERT INTO tp_%s (aggregate_id, n) VALUES ($1, $2) RETURNING id, inorder_at',
				floor(extract(epoch FROM clock_timestamp()))::bigint) INTO id, created_at USING a, n;
		END $$`)
	pgtest.AddClock(t, b.db, "tpoutbox")
	b.cfg.Source.Table = "tpoutbox"
	ctx := context.Background()
	maint, err := pgx.Connect(ctx, b.db.URL)
	require.NoError(t, err)
	defer maint.Close(ctx)
	_, err = maint.Exec(ctx, "SET lock_timeout = '2s'")
	require.NoError(t, err)
	partitions := map[int64]bool{}
	var created, dropped int
	maintain := func() {
		now := time.Now().Unix()
		for s := now - 1; s <= now+3; s++ {
			if !partitions[s] {
				_, err := maint.Exec(ctx, fmt.Sprintf("CREATE TABLE tp_%d PARTITION OF tpoutbox FOR VALUES FROM (to_timestamp(%d)) TO (to_timestamp(%d))", s, s, s+1))
				require.NoError(t, err, "create a partition ahead")
				partitions[s], created = true, created+1
			}
		}
		at, _ := (&bundle{db: b.db}).position(t, b.cfg.Process)
		for s := range partitions {
			if s+1 > at.Unix() || s+1 > now-1 {
				continue // not delivered yet, or still written to
			}
			_, err := maint.Exec(ctx, fmt.Sprintf("ALTER TABLE tpoutbox DETACH PARTITION tp_%d", s))
			require.NoError(t, err, "detach a delivered partition")
			_, err = maint.Exec(ctx, fmt.Sprintf("DROP TABLE tp_%d", s))
			require.NoError(t, err, "drop a detached partition")
			delete(partitions, s)
			dropped++
		}
	}
	maintain()
	stop := start(t, b.cfg)

	type row struct {
		id int64
		at time.Time
	}
	var mu sync.Mutex
	var wrote []row
	deadline := time.Now().Add(5 * time.Second)
	direct := make(chan struct{})
	go func() { // the writer straight into partitions, committing 0-30ms after its insert
		defer close(direct)
		for i := 0; time.Now().Before(deadline); i++ {
			var r row
			err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, "SELECT * FROM insert_into_partition($1, $2)", fmt.Sprint("b", i%4), i).Scan(&r.id, &r.at); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT pg_sleep($1)", float64(i%4)*0.01)
				return err
			})
			if err != nil { // the second turned between the partition's name and the row's created_at
				continue
			}
			mu.Lock()
			wrote = append(wrote, r)
			mu.Unlock()
		}
	}()
	lastMaintained := time.Time{}
	for i := 0; time.Now().Before(deadline); i++ {
		if time.Since(lastMaintained) >= 100*time.Millisecond {
			maintain()
			lastMaintained = time.Now()
		}
		var r row
		require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO tpoutbox (aggregate_id, n) VALUES ($1, $2) RETURNING id, inorder_at",
			fmt.Sprint("a", i%4), i).Scan(&r.id, &r.at))
		mu.Lock()
		wrote = append(wrote, r)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	<-direct
	// In the order of the inserts by the table's clock, which each insert returned.
	slices.SortFunc(wrote, func(a, b row) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	want := make([]int64, len(wrote))
	for i, r := range wrote {
		want[i] = r.id
	}
	last := slices.Max(want)
	waitFor(t, "the last row", func() bool { return b.sink.has(last) })
	waitFor(t, "every row", func() bool { got, _ := b.sink.delivered(); return len(got) >= len(want) })
	got, _ := b.sink.delivered()
	require.Equal(t, want, got, "every row once, in order")
	require.Positive(t, dropped, "partitions were dropped while the stream ran")
	t.Logf("%d rows; %d partitions created, %d detached and dropped", len(wrote), created, dropped)
	require.NoError(t, stop())
}

// TestAStructStreamWaitsForAFieldsColumn: a process scanning into a struct reads its fields' columns, so
// a column added or dropped elsewhere changes nothing, and a field's column renamed makes it wait until
// it is renamed back.
func TestAStructStreamWaitsForAFieldsColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Source.Columns = nil // the struct's fields
	obs := &sourceObserver{}
	b.cfg.Observer = obs
	stop := start(t, b.cfg)
	ids := b.insert(t, 3)
	waitFor(t, "the first rows", func() bool { return b.h.count() == 3 })

	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE events ADD COLUMN tenant text, DROP COLUMN payload")
	ids = append(ids, b.insert(t, 2)...)
	waitFor(t, "the rows after ADD and DROP", func() bool { return b.h.count() == 5 })

	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE events RENAME COLUMN seq TO position")
	waitFor(t, "the stream to wait for seq", func() bool { c, w := obs.now(); return w && c == "seq" })
	b.db.Exec(t, "INSERT INTO events (aggregate_id, position) VALUES ('a', 9)")
	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE events RENAME COLUMN position TO seq")
	waitFor(t, "the row inserted while it waited", func() bool { return b.h.count() == 6 })
	_, w := obs.now()
	require.False(t, w)
	require.Equal(t, ids, b.h.ids()[:5])
	require.Equal(t, 9, b.h.got[5].Value.Seq)
	require.NoError(t, stop())
}

// A wait for the source that a stopped run left in the cursor row is cleared by the next run once the
// source fits again, though its first look finds the columns as its start-up inspected them (and does not
// inspect them again).
func TestAWaitLeftByAStoppedRunIsClearedByTheNext(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	b.cfg.Source.Columns = []string{"id", "aggregate_id", "payload", "created_at"}
	said := func() string {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		require.NoError(t, err)
		require.Len(t, procs, 1)
		return procs[0].Info.SourceWait
	}
	stop := start(t, b.cfg)
	b.allDelivered(t, b.mark(t))
	b.migrate(t, "ALTER TABLE outbox RENAME COLUMN payload TO body")
	waitFor(t, "status to say the stream waits for payload", func() bool { return said() != "" })
	require.NoError(t, stop())
	require.NotEmpty(t, said(), "the stopped run's wait stays in the cursor row")

	b.migrate(t, "ALTER TABLE outbox RENAME COLUMN body TO payload")
	stop = start(t, b.cfg)
	b.allDelivered(t, b.mark(t))
	waitFor(t, "the next run to clear the wait", func() bool { return said() == "" })
	require.NoError(t, stop())
}
