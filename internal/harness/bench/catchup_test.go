package bench

import (
	"context"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

// catchUp is the catch-up of a backlog with the memory of the test process during it, in MiB.
type catchUp struct {
	result
	rssBefore float64 // VmRSS at the start
	hwmBefore float64 // VmHWM at the start, before any reset: the process's peak so far
	peak      float64 // the peak during the catch-up (see reset)
	reset     bool    // VmHWM was reset at the start, so peak is VmHWM at the end; else the sampled peak
	sampled   float64 // the highest VmRSS sampled every 50ms
}

// measureCatchUp drains a backlog of n events through a handler that does nothing, with a checkpoint per
// batch of 1000, and watches the RSS of the test process meanwhile: VmHWM reset at the start and read at
// the end, and VmRSS sampled every 50ms (the peak when the reset is not possible).
func measureCatchUp(tb testing.TB, n int) catchUp {
	db := insertedEvents(tb, n)
	lastID, lastAt := lastRow(tb, db, "events")
	noteServer(tb, db.Pool)

	var c catchUp
	debug.FreeOSMemory() // a GC that returns what is free, so that the start is not inflated by earlier measures
	c.rssBefore, c.hwmBefore = rssMiB()
	c.reset = resetHWM()
	var (
		mu      sync.Mutex
		sampled = c.rssBefore
		stop    = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rss, _ := rssMiB()
				mu.Lock()
				sampled = max(sampled, rss)
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-stopped }) }
	tb.Cleanup(halt) // when drain fails the test

	c.result = drain(tb, db, processor.Config[event]{
		StartFrom:  inordertype.StartFromBeginning,
		Process:    "bench_catchup",
		Source:     inordertype.Source{Table: "events", Columns: eventColumns},
		Handler:    noopHandler,
		BatchSize:  1000,
		Checkpoint: processor.CheckpointBatch,
	}, n, lastID, lastAt, 5*time.Minute)
	halt()
	rss, hwm := rssMiB()
	c.sampled = max(sampled, rss)
	c.peak = c.sampled
	if c.reset {
		c.peak = max(hwm, c.sampled)
	}
	return c
}

const readCostSQL = `
	SELECT id, aggregate_id, seq, created_at FROM events
	WHERE (created_at, id) > ($1, $2) AND created_at < $3 ORDER BY created_at, id LIMIT 1000`

// measureReadCost times one batch read of the processor's kind (a keyset page below a horizon) from the
// middle of a table of each of sizes rows, reads times each after 10 unmeasured, and returns the median of
// each in microseconds. The reads of the tables alternate, so that the drift of a shared machine falls on
// all alike.
func measureReadCost(tb testing.TB, sizes []int, reads int) []figure {
	type table struct {
		read  func() time.Duration
		times []time.Duration
	}
	tables := make([]*table, len(sizes))
	for i, n := range sizes {
		tables[i] = &table{read: batchReader(tb, n), times: make([]time.Duration, 0, reads)}
	}
	for range 10 {
		for _, t := range tables {
			t.read()
		}
	}
	for range reads {
		for _, t := range tables {
			t.times = append(t.times, t.read())
		}
	}
	figs := make([]figure, len(tables))
	for i, t := range tables {
		slices.Sort(t.times)
		figs[i] = figure{n: reads, value: float64(t.times[len(t.times)/2]) / float64(time.Microsecond), unit: micros}
	}
	return figs
}

// batchReader returns a function that reads the 1000-row page after the middle row of a fresh n-row events
// table, below a horizon of now, scanning the rows into Go values, and returns how long that took.
func batchReader(tb testing.TB, n int) func() time.Duration {
	db := insertedEvents(tb, n)
	conn := connect(tb, db)
	ctx := context.Background()
	var at time.Time
	var id int64
	if err := conn.QueryRow(ctx, "SELECT created_at, id FROM events ORDER BY created_at, id OFFSET $1 LIMIT 1",
		n/2).Scan(&at, &id); err != nil {
		tb.Fatalf("middle row: %v", err)
	}
	horizon := time.Now()
	want := min(1000, n-n/2-1)
	return func() time.Duration {
		start := time.Now()
		rows, err := conn.Query(ctx, readCostSQL, at, id, horizon)
		if err != nil {
			tb.Fatalf("batch read: %v", err)
		}
		got := 0
		var e event
		for rows.Next() {
			if err := rows.Scan(&e.ID, &e.AggregateID, &e.Seq, &e.CreatedAt); err != nil {
				tb.Fatalf("batch read: %v", err)
			}
			got++
		}
		if err := rows.Err(); err != nil {
			tb.Fatalf("batch read: %v", err)
		}
		d := time.Since(start)
		if got != want {
			tb.Fatalf("batch read: %d rows, want %d", got, want)
		}
		return d
	}
}
