package processor_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// event is the test source row.
type event struct {
	ID          int64     `db:"id"`
	AggregateID string    `db:"aggregate_id"`
	Seq         int       `db:"seq"`
	CreatedAt   time.Time `db:"created_at"`
}

const eventsDDL = `
	CREATE TABLE events (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		seq          integer NOT NULL,
		payload      jsonb,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX events_created_at_id_idx ON events (created_at, id);`

// collector is a handler that records what it received, and fails on demand.
type collector struct {
	mu     sync.Mutex
	got    []handlers.Record[event]
	failOn map[int64]error // record id -> error to return
	calls  map[int64]int
	block  chan struct{} // when set, Handle waits on it (after signalling started)
	start  chan int64
}

func newCollector() *collector {
	return &collector{failOn: map[int64]error{}, calls: map[int64]int{}}
}

func (c *collector) Handle(ctx context.Context, rec *handlers.Record[event]) error {
	c.mu.Lock()
	c.calls[rec.Value.ID]++
	err := c.failOn[rec.Value.ID]
	block, start := c.block, c.start
	c.mu.Unlock()
	if start != nil {
		start <- rec.Value.ID
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.got = append(c.got, *rec)
	c.mu.Unlock()
	return nil
}

func (c *collector) setFail(id int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.failOn, id)
	} else {
		c.failOn[id] = err
	}
}

func (c *collector) ids() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, len(c.got))
	for i, r := range c.got {
		out[i] = r.Value.ID
	}
	return out
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

type bundle struct {
	db  *pgtest.DB
	cfg processor.Config[event]
	h   *collector
}

// setup gives a test its own database with an events table and a processor configuration that
// delivers to a collector.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, eventsDDL)
	pgtest.AddClock(t, db, "events")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	h := newCollector()
	return &bundle{db: db, h: h, cfg: processor.Config[event]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "test_process",
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "events", Columns: []string{"id", "aggregate_id", "seq", "created_at"}},
		Handler:      h,
		BatchSize:    10,
		PollInterval: 20 * time.Millisecond,
		RetryMin:     20 * time.Millisecond,
		RetryMax:     100 * time.Millisecond,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel),
	}}
}

// insert adds n events for one aggregate in one statement (so they may tie on created_at) and returns
// their ids.
func (b *bundle) insert(t *testing.T, n int) []int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		INSERT INTO events (aggregate_id, seq) SELECT 'a', g FROM generate_series(1, $1) g RETURNING id`, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// start runs a processor with cfg until the test ends (or stop is called) and returns its result.
func start[T any](t *testing.T, cfg processor.Config[T]) (stop func() error) {
	t.Helper()
	p, err := processor.New(cfg)
	require.NoError(t, err)
	return testrun.Start(t, p.Run)
}

// position reads the durable position of process.
func (b *bundle) position(t *testing.T, process string) (time.Time, string) {
	t.Helper()
	var at *time.Time
	var id *string
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT position_created_at, position_id FROM inorder.position WHERE process_name = $1", process).Scan(&at, &id)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, "" // not registered yet
	}
	require.NoError(t, err)
	if at == nil {
		return time.Time{}, ""
	}
	s := ""
	if id != nil {
		s = *id
	}
	return *at, s
}

// dropClock takes the insert clock off the events table again: for a test of the opt-ins that read a
// table without it by created_at (inordertype.HorizonWriters, HorizonTransactions).
func (b *bundle) dropClock(t *testing.T) {
	t.Helper()
	b.db.Exec(t, "DROP TRIGGER inorder_insert_clock ON events; ALTER TABLE events DROP COLUMN inorder_at")
}

// partitionIndex creates the index an n-way partitioned process over events needs: by the insert clock,
// or by created_at once the clock is dropped.
func (b *bundle) partitionIndex(t *testing.T, n int) {
	t.Helper()
	var clocked bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = 'events'::regclass AND attname = 'inorder_at' AND NOT attisdropped)`).Scan(&clocked))
	at := "created_at"
	if clocked {
		at = source.ClockAtExpr("created_at")
	}
	b.db.Exec(t, source.PartitionIndexSQL("events", "aggregate_id", at, "id", n))
}

// waitFor is the tests' one wait: 20s, every 5ms.
var waitFor = testrun.Eventually

func idsText(ids []int64) string { return fmt.Sprint(ids) }

var errTest = errors.New("test failure")

func idText(id int64) string { return fmt.Sprint(id) }
