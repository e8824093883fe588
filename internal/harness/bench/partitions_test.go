package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/processor"
)

// measureSleep calls time.Sleep(time.Millisecond) n times in a row: the most records a second that one
// stream through the 1ms handler of the partitioned runs can move.
func measureSleep(n int) result {
	start := time.Now()
	for range n {
		time.Sleep(time.Millisecond)
	}
	return result{n: n, elapsed: time.Since(start)}
}

// partEnd is the last row of one partition.
type partEnd struct {
	id string
	at time.Time
}

// partsObserver signals when every partition's position has reached its last row's created_at. With a
// checkpoint per batch it is told before the commit; the caller then waits for the positions.
type partsObserver struct {
	nopObserver
	mu      sync.Mutex
	pending map[string]time.Time // partition process name -> created_at of its last row, until reached
	done    chan struct{}
}

func (o *partsObserver) Position(process string, createdAt time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.pending[process]
	if !ok || createdAt.Before(at) {
		return
	}
	delete(o.pending, process)
	if len(o.pending) == 0 {
		close(o.done)
	}
}

func (*partsObserver) Batch(string, int)                    {}
func (*partsObserver) Handled(string, time.Duration, error) {}
func (*partsObserver) Halted(string, bool)                  {}
func (*partsObserver) Locked(string, bool)                  {}
func (*partsObserver) Hold(string, time.Duration)           {}
func (*partsObserver) Connected(string, bool)               {}

// measurePartitions drains a backlog of n events spread over keys keys, split into partitions streams,
// through a handler that sleeps 1ms per record, with instances runners of NewPartitioned in this process
// (each its own instance name, a slot for every partition). It is timed from Run until
// every partition's position holds that partition's last row. It also returns the speedup over one
// stream that the spread of the keys allows: n over the rows of the largest partition.
func measurePartitions(tb testing.TB, partitions, instances, n, keys int) (result, float64) {
	tb.Helper()
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, `INSERT INTO events (aggregate_id, seq) SELECT 'k' || (g % $2), g FROM generate_series(1, $1) g`,
		n, keys)
	db.Exec(tb, source.PartitionIndexSQL("events", "aggregate_id", source.ClockAtExpr("created_at"), "id", partitions))
	db.Exec(tb, "VACUUM ANALYZE events")
	noteServer(tb, db.Pool)
	ctx := context.Background()

	process := fmt.Sprintf("bench_part_%d_%d", partitions, instances)
	rows, err := db.Pool.Query(ctx, `
		SELECT DISTINCT ON (p) p, id::text, at, count(*) OVER (PARTITION BY p)
		FROM (SELECT `+source.PartitionExpr("aggregate_id", partitions)+` AS p, id, coalesce(inorder_at, created_at) AS at
		      FROM events) s
		ORDER BY p, at DESC, id DESC`)
	if err != nil {
		tb.Fatalf("last rows of the partitions: %v", err)
	}
	ends := map[string]partEnd{}
	largest := int64(0)
	for rows.Next() {
		var p int
		var e partEnd
		var count int64
		if err := rows.Scan(&p, &e.id, &e.at, &count); err != nil {
			tb.Fatalf("last rows of the partitions: %v", err)
		}
		ends[store.PartitionName(process, p, partitions)] = e
		largest = max(largest, count)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("last rows of the partitions: %v", err)
	}
	obs := &partsObserver{pending: map[string]time.Time{}, done: make(chan struct{})}
	names := make([]string, 0, len(ends))
	for name, e := range ends {
		obs.pending[name] = e.at
		names = append(names, name)
	}

	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	var handled atomic.Int64
	runners := make([]*processor.Partitioned[event], instances)
	for i := range runners {
		runners[i], err = processor.NewPartitioned(processor.Config[event]{
			StartFrom:    inordertype.StartFromBeginning,
			Process:      process,
			ClientConfig: processor.ClientConfig{ConnConfig: cc, Instance: fmt.Sprintf("bench-%c", 'a'+i)},
			Source:       inordertype.Source{Table: "events", Columns: eventColumns},
			Handler: handlers.HandlerFunc[event](func(context.Context, *handlers.Record[event]) error {
				time.Sleep(time.Millisecond) // the workload
				handled.Add(1)
				return nil
			}),
			BatchSize:    100,
			PollInterval: 200 * time.Millisecond,
			Checkpoint:   processor.CheckpointBatch,
			Observer:     obs,
		}, processor.PartitionOpts{Partitions: partitions, Slots: partitions})
		if err != nil {
			tb.Fatalf("partitioned runner: %v", err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, instances)
	limit := time.NewTimer(3 * time.Minute)
	defer limit.Stop()

	start := time.Now()
	for _, r := range runners {
		go func() { ran <- r.Run(runCtx) }()
	}
	select {
	case <-obs.done:
	case err := <-ran:
		tb.Fatalf("runner stopped before the end of the backlog: %v", err)
	case <-limit.C:
		tb.Fatalf("backlog of %d rows over %d partitions not drained within 3m", n, partitions)
	}
	for {
		durable := 0
		rows, err := db.Pool.Query(ctx, "SELECT process_name, position_id FROM inorder.position WHERE process_name = ANY($1)", names)
		if err != nil {
			tb.Fatalf("read cursors: %v", err)
		}
		for rows.Next() {
			var name string
			var pos *string
			if err := rows.Scan(&name, &pos); err != nil {
				tb.Fatalf("read cursors: %v", err)
			}
			if pos != nil && *pos == ends[name].id {
				durable++
			}
		}
		if err := rows.Err(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			tb.Fatalf("read cursors: %v", err)
		}
		if durable == len(names) {
			break
		}
		select {
		case err := <-ran:
			tb.Fatalf("runner stopped before the end of the backlog: %v", err)
		case <-limit.C:
			tb.Fatalf("backlog of %d rows over %d partitions not durable within 3m", n, partitions)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	for range runners {
		select {
		case err := <-ran:
			if err != nil {
				tb.Fatalf("runner: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Fatalf("runner did not stop within 30s")
		}
	}
	if got := handled.Load(); got < int64(n) {
		tb.Fatalf("handled %d records, want %d", got, n)
	}
	return result{n: n, elapsed: elapsed}, float64(n) / float64(largest)
}
