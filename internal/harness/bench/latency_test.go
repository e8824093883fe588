package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// latency is the time from commit to handler of the rows of a steady insert rate.
type latency struct {
	rows      int // rows measured
	p50, p99  time.Duration
	writeRate float64 // rows a second the writer achieved
	// pgRows, pgP50 and pgP99 are the time from commit to a NOTIFY arriving on a listener of the test's
	// own, when listening.
	pgRows       int
	pgP50, pgP99 time.Duration
	// readP50 and readP99 are the time from commit to the read that brought the row; batchP50 and
	// batchP99 the time from that read to the handler, in its batch behind the records before it.
	readP50, readP99   time.Duration
	batchP50, batchP99 time.Duration
	// cpP50 and cpP99 are the durations of the processor's checkpoints: from the handler's return to the
	// position committed.
	cpP50, cpP99 time.Duration
	// idleReads counts the reads, while rows arrived, that came a poll interval or more after the read
	// before, that is after an idle wait; idleEmpty those of them that brought nothing.
	idleReads, idleEmpty int
	// walSyncs is how many times the server flushed its WAL to disk while the writer ran, per row written
	// (pg_stat_wal, the whole cluster); negative when unknown.
	walSyncs float64
	// cpuMachine is the share of the machine's CPU time that was busy while the writer ran (every
	// process, the server and other work on the machine included); cpuSelf the test process's CPU time
	// over the same wall time (1 is one CPU).
	cpuMachine, cpuSelf float64
}

// batchObserver notes every read (when it returned and how many records it brought), and how long each
// checkpoint took: with a checkpoint per record, Position is reported after the commit.
type batchObserver struct {
	nopObserver
	mu          sync.Mutex
	reads       []batchRead
	handled     time.Time
	checkpoints []time.Duration
}

type batchRead struct {
	at time.Time
	n  int
}

func (o *batchObserver) Batch(_ string, n int) {
	at := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads = append(o.reads, batchRead{at, n})
}

func (o *batchObserver) Handled(string, time.Duration, error) {
	at := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handled = at
}

func (o *batchObserver) Position(string, time.Time) {
	at := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.handled.IsZero() {
		o.checkpoints = append(o.checkpoints, at.Sub(o.handled))
		o.handled = time.Time{}
	}
}

func (*batchObserver) Halted(string, bool)        {}
func (*batchObserver) Locked(string, bool)        {}
func (*batchObserver) Hold(string, time.Duration) {}
func (*batchObserver) Connected(string, bool)     {}

func (o *batchObserver) snapshot() []batchRead {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reads)
}

func (o *batchObserver) checkpointed() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.checkpoints)
}

// commit is a row and when its writer saw its COMMIT return.
type commit struct {
	id int64
	at time.Time
}

const insertOneSQL = `INSERT INTO events (aggregate_id, seq) VALUES ($1, $2) RETURNING id`

// measureLatency runs a processor (checkpoint per record, PollInterval 200ms, the CLI defaults otherwise;
// mode "poll" without the probe, "default" and "sparse" with it, "notify" listening without it)
// on an empty events table while one writer inserts single rows, each its own transaction, one due every
// 1/rate second for d; each row's created_at is clock_timestamp() at its insert. A row's latency is the
// time from its writer's COMMIT returning to the handler being called with it, clamped at 0 (the handler
// can be called before the writer has read its commit's reply). With listen, the table has the insert
// trigger and the processor listens; a second listener of the test's own notes when each notification
// arrives, for the latency of Postgres' own delivery.
func measureLatency(tb testing.TB, mode string, rate int, d time.Duration) latency {
	listen := mode == "notify"
	probe := time.Duration(-1)                 // polling only, as before the probe
	if mode == "default" || mode == "sparse" { // "sparse_poll": the sparse stream without the probe
		probe = 0 // the processor's default
	}
	tb.Helper()
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	conn := connect(tb, db) // the writer's
	ctx := context.Background()
	if listen {
		if err := migrations.CreateNotifyTrigger(ctx, conn, "events"); err != nil {
			tb.Fatalf("notify trigger: %v", err)
		}
	}

	var mu sync.Mutex
	handledAt := map[int64]time.Time{}
	var order []int64 // ids in the order the handler got them
	seen := func(id int64) bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := handledAt[id]
		return ok
	}
	obs := &batchObserver{}
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	process := "bench_latency_" + mode
	p, err := processor.New(processor.Config[event]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "events", Columns: eventColumns},
		Handler: handlers.HandlerFunc[event](func(_ context.Context, rec *handlers.Record[event]) error {
			at := time.Now()
			mu.Lock()
			handledAt[rec.Value.ID] = at
			order = append(order, rec.Value.ID)
			mu.Unlock()
			return nil
		}),
		PollInterval:  latencyPoll,
		ProbeInterval: probe,
		Checkpoint:    processor.CheckpointRecord,
		Listen:        listen,
		Observer:      obs,
	})
	if err != nil {
		tb.Fatalf("processor: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		tb.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			select {
			case err := <-ran:
				tb.Fatalf("processor stopped while waiting for %s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(time.Millisecond)
		}
	}
	insert := func(key string, seq int) commit {
		var c commit
		if err := conn.QueryRow(ctx, insertOneSQL, key, seq).Scan(&c.id); err != nil {
			tb.Fatalf("insert: %v", err)
		}
		c.at = time.Now()
		return c
	}

	// Warm up: one row through the processor, and with listen its listener in place.
	warm := insert("warm", 1)
	waitFor("the warm-up row", 30*time.Second, func() bool { return seen(warm.id) })
	var (
		notifiedMu sync.Mutex
		notified   []time.Time
		stopRecv   = func() {}
	)
	if listen {
		waitFor("the processor's listener", 30*time.Second, func() bool {
			var ok bool
			err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'inorder-listen:%' AND state = 'idle'
				AND query <> '')`).Scan(&ok) // LISTEN done, on the listener of the processor's Client
			return err == nil && ok
		})
		lconn := connect(tb, db)
		exec(tb, lconn, "LISTEN "+pgx.Identifier{migrations.NotifyChannel}.Sanitize())
		recvCtx, stop := context.WithCancel(ctx)
		received := make(chan struct{})
		go func() {
			defer close(received)
			for {
				n, err := lconn.WaitForNotification(recvCtx)
				if err != nil {
					return
				}
				if n.Payload == "public.events" {
					at := time.Now()
					notifiedMu.Lock()
					notified = append(notified, at)
					notifiedMu.Unlock()
				}
			}
		}()
		var once sync.Once
		stopRecv = func() { once.Do(func() { stop(); <-received }) }
		tb.Cleanup(stopRecv) // before the connection closes
	}

	// The i-th row is due at start + i/rate. Unlike a time.Ticker, which drops the ticks that pass during
	// a slow insert (an insert of just over 1ms halves the rate), a late row goes at once.
	interval := time.Second / time.Duration(rate)
	commits := make([]commit, 0, int(d/interval)+1)
	syncs0 := walSyncs(db)
	cpu0 := readCPU()
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= d {
			break
		}
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		commits = append(commits, insert(fmt.Sprintf("a%d", i%orderingKeys), i))
	}
	written := time.Since(start)
	cpu1 := readCPU()
	syncs1 := walSyncs(db)
	last := commits[len(commits)-1].id
	waitFor("the last row", time.Minute, func() bool { return seen(last) })
	if listen {
		// The test's own listener may get the last notification after the processor has handled its row.
		waitFor("every notification", 10*time.Second, func() bool {
			notifiedMu.Lock()
			defer notifiedMu.Unlock()
			return len(notified) >= len(commits)
		})
	}
	stopRecv()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("processor did not stop within 30s")
	}

	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, len(commits))
	for _, c := range commits {
		at, ok := handledAt[c.id]
		if !ok {
			tb.Fatalf("row %d was never handled", c.id)
		}
		lat = append(lat, max(at.Sub(c.at), 0))
	}
	l := latency{rows: len(lat), writeRate: float64(len(commits)) / written.Seconds(), walSyncs: -1}
	l.cpuMachine, l.cpuSelf = cpuUse(cpu0, cpu1, written)
	if syncs0 >= 0 && syncs1 >= 0 {
		l.walSyncs = float64(syncs1-syncs0) / float64(len(commits))
	}
	l.p50, l.p99 = percentiles(lat)

	// Which read brought each row: the records of the reads come to the handler in order.
	reads := obs.snapshot()
	readAt := make(map[int64]time.Time, len(order))
	k := 0
	for i, r := range reads {
		// While rows arrived, that is from the first due row to the last commit.
		if i > 0 && !reads[i-1].at.Before(start) && !r.at.After(commits[len(commits)-1].at) &&
			r.at.Sub(reads[i-1].at) >= latencyPoll {
			l.idleReads++
			if r.n == 0 {
				l.idleEmpty++
			}
		}
		for range r.n {
			if k < len(order) {
				readAt[order[k]] = r.at
			}
			k++
		}
	}
	var toRead, inBatch []time.Duration
	for _, c := range commits {
		if r, ok := readAt[c.id]; ok {
			toRead = append(toRead, max(r.Sub(c.at), 0))
			inBatch = append(inBatch, handledAt[c.id].Sub(r))
		}
	}
	if len(toRead) > 0 {
		l.readP50, l.readP99 = percentiles(toRead)
		l.batchP50, l.batchP99 = percentiles(inBatch)
	}
	if cps := obs.checkpointed(); len(cps) > 0 {
		l.cpP50, l.cpP99 = percentiles(cps)
	}
	if listen {
		notifiedMu.Lock()
		defer notifiedMu.Unlock()
		if len(notified) != len(commits) {
			tb.Fatalf("%d notifications for %d commits", len(notified), len(commits))
		}
		pg := make([]time.Duration, len(commits))
		for i, c := range commits {
			pg[i] = max(notified[i].Sub(c.at), 0)
		}
		l.pgRows = len(pg)
		l.pgP50, l.pgP99 = percentiles(pg)
	}
	return l
}

// walSyncs is the server's count of WAL flushes to disk so far (pg_stat_wal), or -1 where unknown.
func walSyncs(db *pgtest.DB) int64 {
	var n int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT wal_sync FROM pg_stat_wal").Scan(&n); err != nil {
		return -1
	}
	return n
}

// percentiles returns the 50th and 99th percentiles of ds (nearest rank), sorting it.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	rank := func(p int) time.Duration { return ds[max((len(ds)*p+99)/100-1, 0)] }
	return rank(50), rank(99)
}
