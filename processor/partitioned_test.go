package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/processor"
)

// deliveries records what every instance delivered, in one global order.
type deliveries struct {
	mu    sync.Mutex
	order []event
	by    map[string]int // instance -> records delivered
	seen  map[int64]int
}

func (d *deliveries) handler(instance string) handlers.Handler[event] {
	return handlers.HandlerFunc[event](func(_ context.Context, rec *handlers.Record[event]) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.order = append(d.order, rec.Value)
		d.by[instance]++
		d.seen[rec.Value.ID]++
		return nil
	})
}

func (d *deliveries) count(instance string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if instance == "" {
		return len(d.order)
	}
	return d.by[instance]
}

func TestPartitionsSpreadOverInstancesAndKeepOrderPerKey(t *testing.T) {
	t.Parallel()
	for _, horizon := range []inordertype.Horizon{inordertype.HorizonAuto, inordertype.HorizonTransactions} {
		t.Run(horizonName(horizon), func(t *testing.T) {
			t.Parallel()
			partitionsSpreadOverInstancesAndKeepOrderPerKey(t, horizon)
		})
	}
}

func partitionsSpreadOverInstancesAndKeepOrderPerKey(t *testing.T, horizon inordertype.Horizon) {
	b := setup(t)
	b.cfg.Source.Horizon = horizon
	if horizon != inordertype.HorizonAuto {
		b.dropClock(t) // the opt-in reads created_at
	}
	b.partitionIndex(t, 4)
	d := &deliveries{by: map[string]int{}, seen: map[int64]int{}}
	instance := func(name string) processor.Config[event] {
		cfg := b.cfg
		cfg.Process = "partitioned"
		cfg.ClientConfig.Instance = name
		cfg.Handler = d.handler(name)
		return cfg
	}
	startPartitioned := func(name string) func() error {
		p, err := processor.NewPartitioned(instance(name), processor.PartitionOpts{Partitions: 4})
		require.NoError(t, err)
		return testrun.Start(t, p.Run)
	}

	// One writer: each key's rows are created in seq order.
	seq := map[string]int{}
	total := 0
	write := func(n int) {
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("k%d", i%12)
			seq[key]++
			b.db.Exec(t, "INSERT INTO events (aggregate_id, seq) VALUES ($1, $2)", key, seq[key])
			total++
		}
	}
	stopA := startPartitioned("a")
	write(60)
	waitFor(t, "instance a to deliver", func() bool { return d.count("") == total })
	startPartitioned("b")
	// a owns all four; with b running its share is two, so it hands partitions over until b works some.
	for d.count("b") == 0 {
		write(12)
		waitFor(t, "the rows", func() bool { return d.count("") == total })
	}
	require.NoError(t, stopA())
	write(48) // all four partitions now fall to b
	waitFor(t, "instance b to take every partition", func() bool { return d.count("") == total })

	d.mu.Lock()
	defer d.mu.Unlock()
	last := map[string]int{}
	for _, e := range d.order {
		require.Equal(t, last[e.AggregateID]+1, e.Seq, "key %s: seq %d after %d", e.AggregateID, e.Seq, last[e.AggregateID])
		last[e.AggregateID] = e.Seq
	}
	for id, n := range d.seen {
		require.Equal(t, 1, n, "record %d delivered %d times", id, n)
	}
	require.Len(t, d.seen, total)
	t.Logf("a delivered %d, b delivered %d", d.by["a"], d.by["b"])
}

func TestPartitionedProcessRefusesAnotherSplit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.partitionIndex(t, 4)
	cfg := b.cfg
	cfg.Process = "split"
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 4, Slots: 1})
	require.NoError(t, err)
	stop := testrun.Start(t, p.Run)
	ids := b.insert(t, 5)
	waitFor(t, "the rows", func() bool { return b.h.count() == 5 })
	require.ElementsMatch(t, ids, b.h.ids())
	require.NoError(t, stop())

	other, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 8})
	require.NoError(t, err)
	err = other.Run(context.Background())
	require.ErrorIs(t, err, store.ErrPartitionsChanged)
	require.Contains(t, err.Error(), "it has 4, asked for 8; drain it and run: inorder repartition --process split --partitions 8")

	b.db.Exec(t, "DROP INDEX events_aggregate_id_p4_idx")
	noIndex, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 4})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = noIndex.Run(ctx)
	require.ErrorIs(t, err, processor.ErrInvalidSource)
	require.Contains(t, err.Error(), `no index serves the partitioned read on public.events; create one`)
	require.Contains(t, err.Error(), `CREATE INDEX CONCURRENTLY IF NOT EXISTS "events_aggregate_id_p4_idx" ON "public"."events" (((hashtextextended(coalesce("aggregate_id"::text, ''), 0) & 2147483647) % 4), (coalesce("inorder_at", "created_at")), "id")`)
}

// A partitioned process stopped before its coordination connected stops cleanly, as one stream does: a
// group stopped during start-up must not report the stop as a failure of the process.
func TestPartitionedProcessStoppedWhileConnectingStopsCleanly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Process = "stopped_early"
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 2})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, p.Run(ctx))
}

// TestRepartitionIsRefusedWhileAnInstanceRuns: a running instance does not always own a partition (it
// hands them over and picks them again), and owning one is not what it takes to be running; repartition
// must refuse while any instance runs, and go through once it stopped.
func TestRepartitionIsRefusedWhileAnInstanceRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.partitionIndex(t, 2)
	cfg := b.cfg
	cfg.Process = "busy"
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 2})
	require.NoError(t, err)
	stop := testrun.Start(t, p.Run)
	b.insert(t, 3)
	waitFor(t, "the rows", func() bool { return b.h.count() == 3 })
	// Repartition also refuses a partition that never ran: let both run once, so that after the stop
	// nothing but a running instance could refuse it.
	ctx := context.Background()
	waitFor(t, "both partitions to run", func() bool {
		var ran int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inorder.cursor
			WHERE starts_with(process_name, 'busy#') AND source_table IS NOT NULL`).Scan(&ran))
		return ran == 2
	})

	opts := cursor.ActionOpts{Actor: "test"}
	_, err = cursor.Repartition(ctx, b.db.Pool, "busy", 3, opts)
	require.ErrorIs(t, err, cursor.ErrBusy)
	require.Contains(t, err.Error(), "an instance is running it; stop every instance first")

	require.NoError(t, stop())
	_, err = cursor.Repartition(ctx, b.db.Pool, "busy", 3, opts)
	require.NoError(t, err, "the stopped instance let go of the process at once")
}
