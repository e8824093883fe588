package cursor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// row is a row of the test table: its place in the stream, by the insert clock.
type row struct {
	at time.Time
	id int64
}

// outbox is a bookings table on a fresh database, and the rows written to it so far, for a test to
// compare with what processors received.
type outbox struct {
	db   *pgtest.DB
	kit  *processortest.DB
	mu   sync.Mutex
	rows []row
}

func newOutbox(t *testing.T) *outbox {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE bookings (
			id           bigserial PRIMARY KEY,
			aggregate_id text NOT NULL DEFAULT 'k',
			created_at   timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id)`)
	pgtest.AddClock(t, db, "bookings")
	return &outbox{db: db, kit: &processortest.DB{Name: db.Name, URL: db.URL, Pool: db.Pool}}
}

// write inserts n rows in one transaction, keys k0..k9 in turn, and keeps them once committed.
func (o *outbox) write(ctx context.Context, n int, commitDelay time.Duration) error {
	return pgx.BeginFunc(ctx, o.db.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO bookings (aggregate_id) SELECT 'k' || (g % 10) FROM generate_series(1, $1) g
			RETURNING coalesce(inorder_at, created_at), id`, n)
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var w row
			err := r.Scan(&w.at, &w.id)
			return w, err
		})
		if err != nil {
			return err
		}
		time.Sleep(commitDelay) // a slow commit: the row is older than its visibility
		o.mu.Lock()
		defer o.mu.Unlock()
		o.rows = append(o.rows, got...)
		return nil
	})
}

// ids are the ids of the rows written, in stream order, from the one after the first skip.
func (o *outbox) ids(skip int) []string {
	o.mu.Lock()
	rows := append([]row(nil), o.rows...)
	o.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].at.Equal(rows[j].at) {
			return rows[i].at.Before(rows[j].at)
		}
		return rows[i].id < rows[j].id
	})
	var out []string
	for _, r := range rows[skip:] {
		out = append(out, strconv.FormatInt(r.id, 10))
	}
	return out
}

// left returns the ids left in the table, in stream order.
func (o *outbox) left(t *testing.T) []string {
	t.Helper()
	rows, err := o.db.Pool.Query(context.Background(), "SELECT id::text FROM bookings ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func (o *outbox) run(t *testing.T, process string, h handlers.Handler[booking]) *processortest.Running {
	t.Helper()
	p, err := processor.New(processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   process, ClientConfig: processor.ClientConfig{ConnConfig: o.kit.ConnConfig(t)}, Source: inordertype.Source{Table: "bookings", Columns: []string{"id"}},
		Handler: h, PollInterval: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	return processortest.Start(t, p, nil)
}

// catchUp runs process until it has delivered every row, then stops it.
func (o *outbox) catchUp(t *testing.T, process string) {
	t.Helper()
	run := o.run(t, process, &processortest.Recorder[booking]{})
	processortest.WaitCaughtUp(t, o.kit, process, nil)
	require.NoError(t, run.Stop())
}

func (o *outbox) position(t *testing.T, process string) inordertype.Position {
	t.Helper()
	infos, err := cursor.Read(context.Background(), o.db.Pool, cursor.ReadOpts{Process: process})
	require.NoError(t, err)
	require.Len(t, infos, 1)
	return infos[0].Info.Position
}

// gate delivers records until it reaches the one with id stopAt, then holds that one until opened.
type gate struct {
	processortest.Recorder[booking]
	stopAt  int64
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate(stopAt int64) *gate {
	return &gate{stopAt: stopAt, reached: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) Handle(ctx context.Context, rec *handlers.Record[booking]) error {
	if rec.Value.ID == g.stopAt {
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Recorder.Handle(ctx, rec)
}

// TestPruneBesideWritersAndRunningProcessors prunes a table while writers add rows (some committing late)
// and two processors run: one keeps up, the other is held on record 101. The prune deletes exactly the
// rows both passed (1..100), in batches, never one the slow process still needs; a dry run before it
// counts the same and deletes nothing. Both processors then receive every row written, exactly once, in
// order: the prune skipped nothing for them.
func TestPruneBesideWritersAndRunningProcessors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 300, 0))
	fast := &processortest.Recorder[booking]{}
	slow := newGate(101)
	o.run(t, "fast", fast)
	o.run(t, "slow", slow)

	stop := make(chan struct{})
	var writers sync.WaitGroup
	var written atomic.Int64
	for w := range 2 {
		writers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				delay := time.Duration(rand.IntN(4)) * 5 * time.Millisecond
				if err := o.write(ctx, 1+w, delay); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				written.Add(1)
			}
		})
	}
	stopWriters := sync.OnceFunc(func() { close(stop); writers.Wait() })
	t.Cleanup(stopWriters)

	<-slow.reached
	await(t, "the slow process's position at record 100", func() bool { return o.position(t, "slow").ID == "100" })
	await(t, "the fast process past the first rows and writers at work", func() bool { return fast.Len() > 300 && written.Load() > 10 })

	opts := cursor.PruneOpts{Table: "bookings", Before: time.Now().Add(time.Hour), BatchSize: 7,
		ActionOpts: cursor.ActionOpts{Actor: "retention", Reason: "keep a day"}}
	dry := opts
	dry.DryRun = true
	res, err := cursor.Prune(ctx, o.db.Pool, dry)
	require.NoError(t, err)
	require.Equal(t, "public.bookings", res.Table)
	require.Equal(t, int64(100), res.Rows, "the rows every process passed")
	require.Equal(t, "100", res.Through.ID)
	require.Equal(t, "100", res.Passed.ID)
	require.NotNil(t, res.Limit)
	require.Equal(t, "slow", res.Limit.Process, "the process behind limits it")
	require.Len(t, res.Readers, 2)
	require.Empty(t, res.Entries)
	require.Equal(t, o.ids(0)[:101], o.left(t)[:101], "a dry run deletes nothing")

	res, err = cursor.Prune(ctx, o.db.Pool, opts)
	require.NoError(t, err)
	require.Equal(t, int64(100), res.Rows)
	require.Equal(t, "100", res.Through.ID)
	require.Equal(t, 15, res.Batches, "100 rows in batches of 7")
	require.Len(t, res.Entries, 2, "one audit entry per process of the table")
	left := o.left(t)
	require.Equal(t, "101", left[0], "the slow process's next record is still there")

	close(slow.open)
	stopWriters()
	processortest.WaitCaughtUp(t, o.kit, "fast", nil)
	processortest.WaitCaughtUp(t, o.kit, "slow", nil)
	all := o.ids(0)
	require.Equal(t, all, fast.IDs(), "the fast process got every row, once, in order")
	require.Equal(t, all, slow.IDs(), "the slow process got every row, once, in order")
	require.Equal(t, all[100:], o.left(t), "exactly the rows both passed were deleted")

	entries, err := cursor.Audit(ctx, o.db.Pool, cursor.AuditOpts{})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, e := range entries {
		require.Equal(t, "prune", e.Action)
		require.Equal(t, "retention", e.Actor)
		require.Equal(t, "keep a day", e.Reason)
		require.NotNil(t, e.Detail)
		require.Equal(t, int64(100), e.Detail.Rows, "the entry counts every batch")
		require.Equal(t, "public.bookings", e.Detail.Table)
		require.Equal(t, "100", e.Detail.Through.ID)
	}
}

// TestPruneKeepsWhatAnyProcessNeeds: a paused, a halted, a retrying and a never-run process each limit a
// prune, a cut-off at or past a halted record is refused (not one past a record only being retried), a
// table nobody reads is refused, and what was pruned
// cannot be rewound to, while a rewind to a time before it starts at the oldest row left. A process
// added after the prune starts there too.
func TestPruneKeepsWhatAnyProcessNeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 100, 0))
	o.db.Exec(t, "CREATE TABLE other (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp())")
	atOf := func(id int) time.Time {
		var at time.Time
		require.NoError(t, o.db.Pool.QueryRow(ctx, "SELECT coalesce(inorder_at, created_at) FROM bookings WHERE id = $1", id).Scan(&at))
		return at
	}
	ops := cursor.ActionOpts{Actor: "ops"}

	o.catchUp(t, "caught")
	o.catchUp(t, "paused")
	_, err := cursor.Rewind(ctx, o.db.Pool, "paused", cursor.RewindTarget{RecordID: "41"}, ops)
	require.NoError(t, err)
	_, err = cursor.Pause(ctx, o.db.Pool, "paused", ops)
	require.NoError(t, err)
	halting := &processortest.Recorder[booking]{}
	halting.Fail("61", handlers.Permanent(errors.New("refused")))
	o.run(t, "halted", halting)
	processortest.WaitHalted(t, o.kit, "halted", nil)
	retrying := &processortest.Recorder[booking]{}
	retrying.Fail("51", errors.New("timeout")) // may pass: retried, not halted
	o.run(t, "retrying", retrying)
	await(t, "the retries of record 51", func() bool { return retrying.Attempts("51") > 1 })

	prune := func(cut time.Time, dry bool) (cursor.PruneResult, error) {
		return cursor.Prune(ctx, o.db.Pool, cursor.PruneOpts{Table: "bookings", Before: cut, DryRun: dry, ActionOpts: ops})
	}
	_, err = prune(atOf(61), true)
	require.ErrorIs(t, err, cursor.ErrHalted, "a cut-off on the halted record")
	require.ErrorContains(t, err, "halted is halted on record 61")
	_, err = prune(atOf(90), false)
	require.ErrorIs(t, err, cursor.ErrHalted, "a cut-off past the halted record")

	res, err := prune(atOf(55), true)
	require.NoError(t, err)
	require.Equal(t, int64(40), res.Rows)
	require.Equal(t, "paused", res.Limit.Process)
	require.Equal(t, "paused", res.Limit.Note)
	notes := map[string]string{}
	for _, r := range res.Readers {
		notes[r.Process] = r.Position.ID + " " + r.Note
	}
	require.Equal(t, map[string]string{"caught": "100 ", "paused": "40 paused", "halted": "60 halted on record 61",
		"retrying": "50 retrying record 51"}, notes, "a stream only retrying a record before the cut-off does not refuse it")

	o.db.Exec(t, "INSERT INTO inorder.cursor (process_name) VALUES ('never')") // registered, never ran
	res, err = prune(atOf(55), false)
	require.NoError(t, err)
	require.Zero(t, res.Rows, "a process that never ran might read the table from its beginning")
	require.Equal(t, "never", res.Limit.Process)
	require.Contains(t, res.Limit.Note, "never ran")
	require.Empty(t, res.Entries, "nothing deleted, nothing audited")
	require.Len(t, o.left(t), 100)

	_, err = cursor.Prune(ctx, o.db.Pool, cursor.PruneOpts{Table: "other", OlderThan: time.Second, ActionOpts: ops})
	require.ErrorIs(t, err, cursor.ErrNoReaders)
	require.ErrorContains(t, err, "public.other")
	require.ErrorContains(t, err, "never")

	_, err = cursor.Forget(ctx, o.db.Pool, "never", ops)
	require.NoError(t, err)
	res, err = prune(atOf(55), false)
	require.NoError(t, err)
	require.Equal(t, int64(40), res.Rows)
	require.Len(t, res.Entries, 4)
	require.Equal(t, "41", o.left(t)[0])

	_, err = cursor.Rewind(ctx, o.db.Pool, "caught", cursor.RewindTarget{RecordID: "10"}, ops)
	require.ErrorIs(t, err, cursor.ErrNoRecord, "a pruned record cannot be delivered again")
	_, err = cursor.Rewind(ctx, o.db.Pool, "caught", cursor.RewindTarget{Time: atOf(41).Add(-time.Hour)}, ops)
	require.NoError(t, err, "a rewind to before the pruned rows")
	again := &processortest.Recorder[booking]{}
	o.run(t, "caught", again)
	late := &processortest.Recorder[booking]{}
	o.run(t, "late", late)
	processortest.WaitCaughtUp(t, o.kit, "caught", nil)
	processortest.WaitCaughtUp(t, o.kit, "late", nil)
	require.Equal(t, o.ids(40), again.IDs(), "the rewind starts at the oldest row left")
	require.Equal(t, o.ids(40), late.IDs(), "a process added after the prune starts at the oldest row left")
}

// beginHook is a DB that runs hook before its nth Begin: Prune runs each batch in a transaction of its
// own, so the hook runs between two batches.
type beginHook struct {
	*pgxpool.Pool
	n     int
	calls int
	hook  func()
}

func (b *beginHook) Begin(ctx context.Context) (pgx.Tx, error) {
	b.calls++
	if b.calls == b.n {
		b.hook()
	}
	return b.Pool.Begin(ctx)
}

// TestPruneReadsThePositionsInEveryBatch rewinds the only process of a table between the first and the
// second batch of a prune: the second batch stops at the new position.
func TestPruneReadsThePositionsInEveryBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 100, 0))
	o.catchUp(t, "billing")
	ops := cursor.ActionOpts{Actor: "ops"}
	db := &beginHook{Pool: o.db.Pool, n: 2, hook: func() {
		_, err := cursor.Rewind(ctx, o.db.Pool, "billing", cursor.RewindTarget{RecordID: "15"}, ops)
		require.NoError(t, err)
	}}
	res, err := cursor.Prune(ctx, db, cursor.PruneOpts{Table: "bookings", Before: time.Now().Add(time.Hour), BatchSize: 10, ActionOpts: ops})
	require.NoError(t, err)
	require.Equal(t, int64(14), res.Rows, "10 in the first batch, then up to the rewound position")
	require.Equal(t, "14", res.Through.ID)
	require.Equal(t, "15", o.left(t)[0])
	require.Equal(t, 2, res.Batches)
}

// TestRewindsAndNewProcessesWaitForAPruneBatch holds the lock a prune batch holds: a rewind and a process
// registering its cursor row both wait for it, so a batch never deletes rows that one of them needs.
func TestRewindsAndNewProcessesWaitForAPruneBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 5, 0))
	o.catchUp(t, "billing")

	batch, err := o.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer batch.Rollback(ctx) //nolint:errcheck // cleanup
	// The prune lock, as migration 7 names it.
	_, err = batch.Exec(ctx, "SELECT pg_advisory_xact_lock(7597132158521930352)")
	require.NoError(t, err)
	waiting := func(n int) func() bool {
		return func() bool {
			var w int
			err := o.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted AND objid = (7597132158521930352 & 4294967295)::bigint::oid`).Scan(&w)
			return err == nil && w == n
		}
	}
	rewound := make(chan error, 1)
	go func() {
		_, err := cursor.Rewind(ctx, o.db.Pool, "billing", cursor.RewindTarget{RecordID: "2"}, cursor.ActionOpts{Actor: "ops"})
		rewound <- err
	}()
	await(t, "the rewind waiting for the batch", waiting(1))
	registered := make(chan error, 1)
	go func() {
		_, err := o.db.Pool.Exec(ctx, "INSERT INTO inorder.cursor (process_name) VALUES ('newcomer')")
		registered <- err
	}()
	await(t, "the new process waiting for the batch", waiting(2))
	require.Empty(t, rewound)
	require.Empty(t, registered)
	require.NoError(t, batch.Commit(ctx))
	require.NoError(t, <-rewound)
	require.NoError(t, <-registered)
}

// ExamplePrune keeps an outbox from growing forever: once the relay has delivered its rows, a dry run
// says how many every process has passed, and the prune deletes them, with an audit entry for the relay.
// A nightly job runs the same with OlderThan, as `inorder prune --table outbox --older-than 720h` does.
func ExamplePrune() {
	ctx := context.Background()
	url := pgtest.ExampleURL()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE outbox (id bigserial PRIMARY KEY,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON outbox (created_at, id)`); err != nil {
		panic(err)
	}
	// The insert clock, which orders the outbox for the relay: what `inorder migrate --table outbox` adds.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	err = migrations.AddClock(ctx, conn.Conn(), "outbox", migrations.ClockOpts{})
	conn.Release()
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO outbox SELECT FROM generate_series(1, 5)"); err != nil {
		panic(err)
	}

	// The relay delivers the outbox; here it runs until it has caught up.
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	relay, err := processor.New(processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "relay", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Source: inordertype.Source{Table: "outbox", Columns: []string{"id"}},
		Handler:      handlers.HandlerFunc[booking](func(context.Context, *handlers.Record[booking]) error { return nil }),
		PollInterval: 10 * time.Millisecond, Logger: zerolog.Nop(),
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	for {
		infos, err := cursor.Read(ctx, pool, cursor.ReadOpts{Process: "relay"})
		if err == nil && len(infos) == 1 && infos[0].Info.Position.ID == "5" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	opts := cursor.PruneOpts{Table: "outbox", Before: time.Now().Add(time.Minute), DryRun: true}
	res, err := cursor.Prune(ctx, pool, opts)
	if err != nil {
		panic(err)
	}
	fmt.Printf("dry run: %d rows, through record %s\n", res.Rows, res.Through.ID)

	opts.DryRun, opts.Actor = false, "retention-job"
	res, err = cursor.Prune(ctx, pool, opts)
	if err != nil {
		panic(err)
	}
	fmt.Printf("deleted %d rows in %d batch; audited for %s\n", res.Rows, res.Batches, res.Entries[0].Process)
	// Output:
	// dry run: 5 rows, through record 5
	// deleted 5 rows in 1 batch; audited for relay
}

// runSplit runs process as two partitions by aggregate_id.
func (o *outbox) runSplit(t *testing.T, process string, h handlers.Handler[booking]) *processortest.Running {
	t.Helper()
	o.db.Exec(t, source.PartitionIndexSQL("bookings", "aggregate_id", source.ClockAtExpr("created_at"), "id", 2))
	p, err := processor.NewPartitioned(processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   process, ClientConfig: processor.ClientConfig{ConnConfig: o.kit.ConnConfig(t)}, Source: inordertype.Source{Table: "bookings", Columns: []string{"id"}},
		Handler: h, PollInterval: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}, processor.PartitionOpts{Partitions: 2})
	require.NoError(t, err)
	return processortest.Start(t, p, nil)
}

// TestPruneAPartitionedProcess: every partition of a partitioned process limits a prune, one that never
// ran at the beginning.
func TestPruneAPartitionedProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 60, 0))
	run := o.runSplit(t, "split", &processortest.Recorder[booking]{})
	processortest.WaitCaughtUp(t, o.kit, "split", nil)
	require.NoError(t, run.Stop())
	var at20 time.Time
	require.NoError(t, o.db.Pool.QueryRow(ctx, "SELECT created_at FROM bookings WHERE id = 20").Scan(&at20))
	ops := cursor.ActionOpts{Actor: "ops"}
	_, err := cursor.Rewind(ctx, o.db.Pool, "split#1/2", cursor.RewindTarget{Time: at20}, ops)
	require.NoError(t, err)

	opts := cursor.PruneOpts{Table: "public.bookings", Before: time.Now().Add(time.Hour), DryRun: true, ActionOpts: ops}
	res, err := cursor.Prune(ctx, o.db.Pool, opts)
	require.NoError(t, err)
	require.Equal(t, int64(19), res.Rows, "the rows before the partition furthest back")
	require.Equal(t, "split", res.Limit.Process)
	require.Equal(t, "split#1/2", res.Limit.Stream)
	require.Len(t, res.Readers, 1, "one process, however many partitions")

	o.db.Exec(t, "DELETE FROM inorder.cursor WHERE process_name = 'split#0/2'") // as if it never ran
	res, err = cursor.Prune(ctx, o.db.Pool, opts)
	require.NoError(t, err)
	require.Zero(t, res.Rows)
	require.Equal(t, "split#0/2", res.Limit.Stream)
	require.Equal(t, "never ran", res.Limit.Note)
}
