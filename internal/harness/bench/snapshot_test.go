package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// Settings and sizes of the measures with a snapshot held (see doc.go): rows flow while the snapshot is
// held, so that the position advances under it for a while, then a burst of rows is inserted in one
// statement and drained.
const (
	heldRate   = 1000             // rows/s flowing, one transaction each
	heldFlow   = 30 * time.Second // how long they flow with the snapshot held, before the burst
	heldWindow = 10 * time.Second // the rows of the flow's last seconds, whose latency counts
	// The bursts: one durable commit per record makes 20,000 rows take a few seconds; with a checkpoint per
	// batch 20,000 rows take a tenth of a second, too short to time, so that burst is ten times larger.
	heldBurstRecord = 20_000
	heldBurstBatch  = 200_000
	// The bursts per stream, the sides taking turns; the median counts. A batch burst lasts a second or
	// less, so it gets more of them.
	heldBursts      = 3
	heldBatchBursts = 5
	// heldWriters insert the rows that flow, each side's own, a key always on the same one: one connection
	// cannot commit 1,000 rows a second on a busy 2-CPU machine, nor two of them at once.
	heldWriters = 5
	heldSample  = time.Second // how often inorder's table sizes are read
	// heldSettle bounds the wait, after the processes have stopped, for the rotation's steps to empty the
	// checkpoint tables: a table is emptied at its turn, a new one every 20s, so three turns and some.
	heldSettle = 90 * time.Second

	sizeTargetMiB = 16 // inorder's tables in all, whatever the hold's length

	// The prune beside a stream: a backlog the stream has passed, pruned while rows flow.
	pruneBacklog = 300_000
	pruneQuiet   = 8 * time.Second // rows flowing with the snapshot held before the prune starts
	pruneReads   = 50              // reads from the stream's position timed before and after the prune
)

// The long scenarios (INORDER_BENCH_LONG=1, `make bench-long`).
const (
	longEnv         = "INORDER_BENCH_LONG"
	longRate        = 300 // rows/s flowing into each stream's table during the hold
	longHold        = 5 * time.Minute
	longBurst       = 20_000
	longBursts      = 3 // bursts per stream, the sides taking turns; the median counts
	longBatchBursts = 5 // 20,000 rows take a checkpoint per batch a fifth of a second: more of them
	longSizeRate    = 1000
	longSizeHold    = 10 * time.Minute
	longDumpHold    = 2 * time.Minute // the real pg_dump's run: how its hold compares with the transaction's
	longSample      = 5 * time.Second
	longAfter       = time.Minute // rows flowing on after the hold, each checkpoint table's turn coming
)

// holdForm is how a snapshot is held.
type holdForm string

const (
	holdNone holdForm = "none" // the reference: no snapshot held
	// holdSnapshot is a REPEATABLE READ transaction that has taken its snapshot and locked nothing: a
	// report, a session idle in transaction.
	holdSnapshot holdForm = "snapshot"
	// holdDump is a transaction as pg_dump opens one: REPEATABLE READ, READ ONLY, its snapshot taken by a
	// read of the catalog, then LOCK TABLE ... IN ACCESS SHARE MODE on every table of the database, one
	// statement each, inorder's own included.
	holdDump holdForm = "dump"
	// holdPgDump is a real pg_dump of the database whose output nobody reads: it blocks writing the data
	// of a filler table larger than the pipe, holding its snapshot and its locks until it is killed.
	holdPgDump holdForm = "pg_dump"
)

// hold is a snapshot held in a database until release.
type hold struct {
	form    holdForm
	pid     uint32
	tables  int // tables it holds ACCESS SHARE on
	release func()
}

// inorderTables are inorder's tables whose sizes the held runs report.
// checkpoint_turns stands for the partitions the rotation attaches for turns while a pg_dump holds the
// three others (see sizesNow).
var inorderTables = []string{"cursor", "checkpoint_0", "checkpoint_1", "checkpoint_2", "checkpoint_turns", "instance",
	"parked", "audit"}

// startHold holds a snapshot in db as form says, and returns once it is held: the holding backend has a
// snapshot (backend_xmin) and, for the pg_dump forms, holds ACCESS SHARE on inorder's cursor table. Its
// release ends it and returns once the backend no longer holds a snapshot.
func startHold(tb testing.TB, db *pgtest.DB, form holdForm) *hold {
	tb.Helper()
	ctx := context.Background()
	h := &hold{form: form, release: func() {}}
	switch form {
	case holdNone:
		return h
	case holdSnapshot, holdDump:
		conn := connect(tb, db)
		mode := ""
		if form == holdDump {
			mode = ", READ ONLY"
		}
		exec(tb, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ"+mode)
		// The first read takes the transaction's snapshot; pg_dump's is a read of the catalog.
		rows, err := conn.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'p') AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
			ORDER BY 1`)
		if err != nil {
			tb.Fatalf("hold: list tables: %v", err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatalf("hold: list tables: %v", err)
		}
		if form == holdDump {
			for _, t := range tables {
				exec(tb, conn, "LOCK TABLE "+t+" IN ACCESS SHARE MODE")
			}
			h.tables = len(tables)
		}
		h.pid = conn.PgConn().PID()
		h.release = func() {
			exec(tb, conn, "COMMIT")
			awaitHoldGone(tb, db, h.pid, false)
		}
	case holdPgDump:
		startPgDump(tb, db, h)
	default:
		tb.Fatalf("hold: unknown form %q", form)
	}
	h.release = sync.OnceFunc(h.release)
	// The snapshot holds back vacuum from now on.
	await(tb, "the hold's snapshot", 30*time.Second, func() (bool, error) {
		var xmin *string
		err := db.Pool.QueryRow(ctx, "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = $1", h.pid).Scan(&xmin)
		return err == nil && xmin != nil, err
	})
	return h
}

// startPgDump runs a real pg_dump of db held open (pgtest.HoldPgDump: blocked writing its output, its
// snapshot and its ACCESS SHARE lock on every table held) and notes its backend and how many tables it
// holds.
func startPgDump(tb testing.TB, db *pgtest.DB, h *hold) {
	tb.Helper()
	d := pgtest.HoldPgDump(tb, db)
	h.pid = d.PID
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l
		WHERE l.pid = $1 AND l.locktype = 'relation' AND l.mode = 'AccessShareLock' AND l.granted
		  AND l.relation IN (SELECT c.oid FROM pg_class c WHERE c.relkind IN ('r', 'p')
		                     AND c.relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace))`,
		h.pid).Scan(&h.tables); err != nil {
		tb.Fatalf("pg_dump's locks: %v", err)
	}
	h.release = func() {
		d.End()
		awaitHoldGone(tb, db, h.pid, true)
	}
}

// awaitHoldGone waits until backend pid holds no snapshot (gone: until it has left).
func awaitHoldGone(tb testing.TB, db *pgtest.DB, pid uint32, gone bool) {
	tb.Helper()
	await(tb, "the hold's end", 30*time.Second, func() (bool, error) {
		var held bool
		q := "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_xmin IS NOT NULL)"
		if gone {
			q = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)"
		}
		err := db.Pool.QueryRow(context.Background(), q, pid).Scan(&held)
		return err == nil && !held, err
	})
}

// await polls cond every 5ms until it holds, failing the test when it errs or limit passes first.
func await(tb testing.TB, what string, limit time.Duration, cond func() (bool, error)) {
	tb.Helper()
	awaitEvery(tb, what, limit, 5*time.Millisecond, cond)
}

// awaitEvery is await polling every interval.
func awaitEvery(tb testing.TB, what string, limit, every time.Duration, cond func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(every)
	}
}

// heldOpts are the settings of one held measure.
type heldOpts struct {
	name string
	// forms are the sides measured at once, each on a database of its own: holdNone is the reference. Their
	// rows flow at the same time and their bursts take turns, so that the drift of a shared machine falls
	// on every side alike.
	forms   []holdForm
	streams []heldStreamOpts
	rate    int           // rows/s flowing into each stream's table while the snapshot is held
	writers int           // connections inserting them, per side (1, 2 or 5: one per key or more); 0 means 1
	flow    time.Duration // how long they flow
	window  time.Duration // latency counts over the rows committed in the flow's last window
	sample  time.Duration // how often inorder's table sizes are read
	// after is how long rows go on flowing once the snapshot has ended, the processes running, before
	// they stop; 0: they stop at once.
	after time.Duration
	// settle, when not 0, bounds the wait, once the processes have stopped, for the rotation's steps to
	// empty every checkpoint table; then inorder's tables are vacuumed and measured again.
	settle time.Duration
	// minutes reports the latency of each minute of the flow.
	minutes bool
}

// heldStreamOpts is one stream of a held measure: a table of its own and a process with the CLI's
// defaults but for the checkpoint.
type heldStreamOpts struct {
	checkpoint processor.Checkpoint
	burst      int // rows in one burst
	bursts     int // bursts, one after another, each drained before the next
}

// sizes are inorder's tables' sizes (pg_total_relation_size: heap, indexes, TOAST) at one moment.
type sizes struct {
	at      time.Duration // since the hold began
	tables  map[string]int64
	entries int64 // in the checkpoint tables; -1 when not counted
}

func (s sizes) total() int64 {
	var n int64
	for _, v := range s.tables {
		n += v
	}
	return n
}

func (s sizes) checkpoints() int64 {
	return s.tables["checkpoint_0"] + s.tables["checkpoint_1"] + s.tables["checkpoint_2"] + s.tables["checkpoint_turns"]
}

// heldRun is what a held measure measured on one side.
type heldRun struct {
	form    holdForm
	tables  int // tables the hold locked
	streams []heldStreamRun
	// writeRate is the rows/s the flow achieved into each table.
	writeRate float64
	// sizes: at the hold's start, the largest total sampled while it lasted, every sample, at its end, once
	// it had ended and a VACUUM ran, and (settle) once the processes had stopped and the rotation's steps
	// had emptied the checkpoint tables, vacuumed again (settled, after settledIn; not when the wait ran out).
	start, maxSize              sizes
	samples                     []sizes
	end, vacuumed, settledSizes sizes
	settled                     bool
	settledIn                   time.Duration
	// truncations counts the checkpoint tables' truncations seen while the snapshot was held (a new
	// relfilenode), truncatedAfter those seen while rows flowed after it ended, and whether every table was
	// among them (allTruncated).
	truncations, truncatedAfter int
	allTruncated                bool
	// cursorDead is what VACUUM (VERBOSE) of inorder.cursor found at the end of the hold, before the
	// snapshot ended: row versions dead but not yet removable, and how many transactions old the removable
	// cutoff was.
	cursorDead, cutoffAge int
	// stats are pg_stat_user_tables of inorder's tables at the end of the hold.
	stats map[string]tableStats
	// lockable counts the checkpoint tables whose lock the rotation could have had at the end of the hold
	// (ACCESS EXCLUSIVE, NOWAIT), as it takes it to empty one; -1 before the checkpoint log.
	lockable    int
	lockHolders []string
}

// heldStreamRun is one stream's part of a held run.
type heldStreamRun struct {
	opts             heldStreamOpts
	p50, p99         time.Duration // latency of the rows of the flow's last window
	windowRows       int
	minutes          [][2]time.Duration // p50 and p99 of each minute of the flow
	drains           []time.Duration    // each burst, from its commit to the position at its last row
	delivered, dups  int
	disorder, missed int
}

// drain is the median burst as a rate.
func (s heldStreamRun) drain() result {
	ds := slices.Clone(s.drains)
	slices.Sort(ds)
	return result{n: s.opts.burst, elapsed: ds[len(ds)/2]}
}

type tableStats struct {
	ins, upd, hot, live, dead, autovacuums int64
}

// heldStream is a stream while it runs: what its handler saw.
type heldStream struct {
	heldStreamOpts
	table, process string

	mu        sync.Mutex
	handled   map[int64]time.Time
	lastByKey map[string]int64
	dups      int
	disorder  int
	target    int64
	reached   chan struct{}
}

func (s *heldStream) handle(_ context.Context, rec *handlers.Record[event]) error {
	at := time.Now()
	id := rec.Value.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.handled[id]; ok {
		s.dups++
	} else {
		s.handled[id] = at
	}
	if last, ok := s.lastByKey[rec.Value.AggregateID]; ok && id <= last {
		s.disorder++
	} else {
		s.lastByKey[rec.Value.AggregateID] = id
	}
	if s.reached != nil && id >= s.target {
		close(s.reached)
		s.reached = nil
	}
	return nil
}

// reach returns a channel closed once the handler has been called with row id or a later one.
func (s *heldStream) reach(id int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if _, ok := s.handled[id]; ok {
		close(ch)
		return ch
	}
	s.target, s.reached = id, ch
	return ch
}

// heldSide is one side of a held measure while it runs: a database, its streams and their processors,
// its writer and its hold.
type heldSide struct {
	form    holdForm
	db      *pgtest.DB
	view    string
	streams []*heldStream
	ran     chan error
	stop    context.CancelFunc
	stopped bool
	writers []*pgx.Conn
	commits [][]commit // per stream
	hold    *hold
	sampler *sampler
	run     heldRun
}

// alive fails when one of the side's processors has stopped.
func (s *heldSide) alive() error {
	select {
	case err := <-s.ran:
		return fmt.Errorf("%s: a processor stopped: %v", s.form, err)
	default:
		return nil
	}
}

// insert commits one row into stream k's table on conn.
func (s *heldSide) insert(tb testing.TB, conn *pgx.Conn, k int, key string, seq int) commit {
	var c commit
	err := conn.QueryRow(context.Background(), "INSERT INTO "+s.streams[k].table+
		" (aggregate_id, seq) VALUES ($1, $2) RETURNING id", key, seq).Scan(&c.id)
	if err != nil {
		tb.Errorf("insert: %v", err)
		return commit{}
	}
	c.at = time.Now()
	return c
}

// awaitReached waits until stream k's handler has been called with row id.
func (s *heldSide) awaitReached(tb testing.TB, k int, id int64, what string, limit time.Duration) {
	tb.Helper()
	ch := s.streams[k].reach(id)
	await(tb, fmt.Sprintf("%s (%s, %s)", what, s.form, s.streams[k].process), limit, func() (bool, error) {
		select {
		case <-ch:
			return true, nil
		default:
			return false, s.alive()
		}
	})
}

// stopProcessors stops the side's processors, each of which must stop cleanly.
func (s *heldSide) stopProcessors(tb testing.TB) {
	tb.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.stop()
	for range s.streams {
		select {
		case err := <-s.ran:
			if err != nil {
				tb.Fatalf("%s: processor: %v", s.form, err)
			}
		case <-time.After(30 * time.Second):
			tb.Fatalf("%s: processor did not stop within 30s", s.form)
		}
	}
}

// flowAll inserts a row into every stream's table of every side at rate for d, every side paced from the
// same start, and returns the rows/s achieved per table. Each side's writers share the ticks, tick n going
// to writer n mod len(writers), so that a key (n mod orderingKeys) always has the same writer when their
// number divides orderingKeys, and its rows commit in the order of their ids.
func flowAll(tb testing.TB, sides []*heldSide, rate int, d time.Duration, seq0 int) float64 {
	tb.Helper()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	ticks := make([][]int, len(sides))
	written := make([][][][]commit, len(sides)) // side, writer, stream
	for i, s := range sides {
		ticks[i] = make([]int, len(s.writers))
		written[i] = make([][][]commit, len(s.writers))
		for w, conn := range s.writers {
			written[i][w] = make([][]commit, len(s.streams))
			wg.Go(func() {
				for n := w; ; n += len(s.writers) {
					due := start.Add(time.Duration(n) * interval)
					if due.Sub(start) >= d || tb.Failed() {
						return
					}
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					}
					for k := range s.streams {
						written[i][w][k] = append(written[i][w][k],
							s.insert(tb, conn, k, fmt.Sprintf("a%d", n%orderingKeys), seq0+n+1))
					}
					ticks[i][w]++
					if n%1000 < len(s.writers) && s.alive() != nil {
						tb.Errorf("%v", s.alive())
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	least := math.MaxInt
	for i, s := range sides {
		sum := 0
		for w := range s.writers {
			sum += ticks[i][w]
			for k := range s.streams {
				s.commits[k] = append(s.commits[k], written[i][w][k]...)
			}
		}
		for k := range s.streams {
			slices.SortFunc(s.commits[k], func(a, b commit) int { return cmp.Compare(a.id, b.id) })
		}
		least = min(least, sum)
	}
	return float64(least) / time.Since(start).Seconds()
}

// measureHeld runs the streams of o on a fresh database for each of o's forms, all at once: each process
// delivers a first row, then the snapshot is held (as the side's form says), rows flow at o.rate into
// every stream's table of every side for o.flow, and each stream in turn gets its bursts, inserted in one
// statement once the stream has caught up, the sides taking turns, each timed from its commit until the
// process's position is its last row. Then the snapshots end, inorder's tables are vacuumed and measured,
// rows flow on for o.after, the processes stop, and (o.settle) the rotation's steps are taken until the
// checkpoint tables are empty. Every row must have been delivered once, in order per key.
func measureHeld(tb testing.TB, o heldOpts) []heldRun {
	tb.Helper()
	ctx := context.Background()
	sides := make([]*heldSide, len(o.forms))
	for i, form := range o.forms {
		s := &heldSide{form: form, db: pgtest.New(tb), ran: make(chan error, len(o.streams)),
			commits: make([][]commit, len(o.streams))}
		sides[i] = s
		noteServer(tb, s.db.Pool)
		s.view = positionView(tb, s.db)
		cc, err := pgx.ParseConfig(s.db.URL)
		if err != nil {
			tb.Fatalf("parse url: %v", err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		s.stop = cancel
		defer s.stopProcessors(tb)
		for _, so := range o.streams {
			st := &heldStream{heldStreamOpts: so, table: "events_" + string(so.checkpoint),
				process: fmt.Sprintf("bench_held_%s_%s", o.name, so.checkpoint),
				handled: map[int64]time.Time{}, lastByKey: map[string]int64{}}
			s.streams = append(s.streams, st)
			s.db.Exec(tb, strings.ReplaceAll(eventsDDL, "events", st.table))
			pgtest.AddClock(tb, s.db, st.table)
			p, err := processor.New(processor.Config[event]{
				StartFrom:    inordertype.StartFromBeginning,
				Process:      st.process,
				ClientConfig: processor.ClientConfig{ConnConfig: cc},
				Source:       inordertype.Source{Table: st.table, Columns: eventColumns},
				Handler:      handlers.HandlerFunc[event](st.handle),
				Checkpoint:   so.checkpoint, // the CLI's defaults otherwise: adaptive batches, the probe, 200ms polls
			})
			if err != nil {
				tb.Fatalf("processor: %v", err)
			}
			go func() { s.ran <- p.Run(runCtx) }()
		}
		for range max(o.writers, 1) {
			s.writers = append(s.writers, connect(tb, s.db))
		}
		for k := range s.streams {
			first := s.insert(tb, s.writers[0], k, "warm", 0)
			s.awaitReached(tb, k, first.id, "the first row", time.Minute)
		}
	}

	for _, s := range sides {
		s.hold = startHold(tb, s.db, s.form)
		defer func() { s.hold.release() }()
		held := time.Now()
		s.run = heldRun{form: s.form, tables: s.hold.tables, stats: map[string]tableStats{}}
		s.run.start = readSizes(tb, s.db, held)
		s.sampler = startSampler(tb, s.db, o.sample, held)
	}
	flowStart := time.Now()
	rate := flowAll(tb, sides, o.rate, o.flow, 0)
	ticks := int(o.flow / (time.Second / time.Duration(o.rate)))

	// Every stream catches up, then the bursts: stream by stream, the sides taking turns.
	for _, s := range sides {
		s.run.writeRate = rate
		for k := range s.streams {
			s.awaitReached(tb, k, s.commits[k][len(s.commits[k])-1].id, "caught up with the flow", 2*time.Minute)
			s.run.streams = append(s.run.streams, heldStreamRun{opts: s.streams[k].heldStreamOpts})
		}
	}
	for k, so := range o.streams {
		for b := range so.bursts {
			for j := range sides {
				s := sides[(j+b)%len(sides)]
				var lastID int64
				if err := s.writers[0].QueryRow(ctx, `WITH ins AS (INSERT INTO `+s.streams[k].table+` (aggregate_id, seq)
					SELECT 'a' || (g % $2), $3 + g FROM generate_series(1, $1) g RETURNING id) SELECT max(id) FROM ins`,
					so.burst, orderingKeys, ticks+b*so.burst).Scan(&lastID); err != nil {
					tb.Fatalf("burst: %v", err)
				}
				committed := time.Now()
				s.awaitReached(tb, k, lastID, fmt.Sprintf("a burst of %d drained", so.burst), 5*time.Minute)
				want := strconv.FormatInt(lastID, 10)
				awaitEvery(tb, "the burst's last position durable", time.Minute, time.Millisecond, func() (bool, error) {
					var pos *string
					err := s.db.Pool.QueryRow(ctx, "SELECT position_id FROM "+s.view+" WHERE process_name = $1",
						s.streams[k].process).Scan(&pos)
					return err == nil && pos != nil && *pos == want, err
				})
				s.run.streams[k].drains = append(s.run.streams[k].drains, time.Since(committed))
			}
		}
	}

	// Latency of the flow's rows.
	for _, s := range sides {
		for k, st := range s.streams {
			sr := &s.run.streams[k]
			st.mu.Lock()
			// The window ends at this stream's last commit, not at the end of the whole flow: on a busy
			// machine one side's writers can finish more than a window after another's, whose rows a window
			// ending with the slowest would leave out altogether.
			var flowEnd time.Time
			for _, c := range s.commits[k] {
				if c.at.After(flowEnd) {
					flowEnd = c.at
				}
			}
			var window []time.Duration
			byMinute := map[int][]time.Duration{}
			for _, c := range s.commits[k] {
				lat := max(st.handled[c.id].Sub(c.at), 0)
				if !c.at.Before(flowEnd.Add(-o.window)) {
					window = append(window, lat)
				}
				m := int(c.at.Sub(flowStart) / time.Minute)
				byMinute[m] = append(byMinute[m], lat)
			}
			st.mu.Unlock()
			if len(window) == 0 {
				tb.Fatalf("%s, %s: no row of the flow committed", s.form, st.process)
			}
			sr.windowRows = len(window)
			sr.p50, sr.p99 = percentiles(window)
			if o.minutes {
				for m := 0; len(byMinute[m]) > 0; m++ {
					p50, p99 := percentiles(byMinute[m])
					sr.minutes = append(sr.minutes, [2]time.Duration{p50, p99})
				}
			}
		}
	}

	// The end of the hold: sizes, what vacuum cannot remove yet, the tables' statistics; then the end.
	for _, s := range sides {
		s.run.end = readSizes(tb, s.db, s.sampler.since)
		s.run.cursorDead, s.run.cutoffAge = vacuumVerbose(tb, s.db, "inorder.cursor")
		s.run.stats = readTableStats(tb, s.db)
		s.run.lockable, s.run.lockHolders = lockableCheckpoints(tb, s.db, s.hold)
	}
	for _, s := range sides {
		s.hold.release()
		s.run.truncations = s.sampler.mark()
	}
	for _, s := range sides {
		exec(tb, connect(tb, s.db), "VACUUM "+qualifiedInorderTables(tb, s.db))
		s.run.vacuumed = readSizes(tb, s.db, s.sampler.since)
	}
	if o.after > 0 {
		// The processes go on: each checkpoint table is emptied at its turn.
		flowAll(tb, sides, o.rate, o.after, ticks+1_000_000)
		for _, s := range sides {
			s.run.truncatedAfter, s.run.allTruncated = s.sampler.truncatedSinceMark()
			for k := range s.streams {
				s.awaitReached(tb, k, s.commits[k][len(s.commits[k])-1].id, "caught up after the hold", 2*time.Minute)
			}
		}
	}
	for _, s := range sides {
		s.stopProcessors(tb)
	}
	if o.settle > 0 {
		// Stopped, each process has written its position into its cursor row, so that no entry is any
		// process's newest: the rotation's steps (what the processors' prober takes every 5s) empty each
		// checkpoint table at its turn.
		released := time.Now()
		deadline := released.Add(o.settle)
		conns := make([]*pgx.Conn, len(sides))
		for i, s := range sides {
			conns[i] = connect(tb, s.db)
		}
		for {
			left := 0
			for i, s := range sides {
				if s.run.settled {
					continue
				}
				if err := rotateStep(ctx, conns[i]); err != nil {
					tb.Fatalf("rotate: %v", err)
				}
				if checkpointEntries(tb, s.db) == 0 {
					s.run.settled, s.run.settledIn = true, time.Since(released)
				} else {
					left++
				}
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second) // the rotation's clock names a new table every 20s
		}
		for _, s := range sides {
			exec(tb, connect(tb, s.db), "VACUUM "+qualifiedInorderTables(tb, s.db))
			s.run.settledSizes = readSizes(tb, s.db, s.sampler.since)
		}
	}
	runs := make([]heldRun, len(sides))
	for i, s := range sides {
		s.run.samples, _ = s.sampler.stop()
		s.run.maxSize = s.run.end
		for _, z := range s.run.samples {
			if z.at <= s.run.end.at && z.total() > s.run.maxSize.total() {
				s.run.maxSize = z
			}
		}
		checkDelivered(tb, s)
		runs[i] = s.run
	}
	return runs
}

// checkDelivered fails unless every row of the side's tables was delivered once, in order per key.
func checkDelivered(tb testing.TB, s *heldSide) {
	tb.Helper()
	for k, st := range s.streams {
		rows, err := s.db.Pool.Query(context.Background(), "SELECT id FROM "+st.table)
		if err != nil {
			tb.Fatalf("read ids: %v", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			tb.Fatalf("read ids: %v", err)
		}
		st.mu.Lock()
		sr := &s.run.streams[k]
		sr.delivered, sr.dups, sr.disorder = len(st.handled), st.dups, st.disorder
		for _, id := range ids {
			if _, ok := st.handled[id]; !ok {
				sr.missed++
			}
		}
		st.mu.Unlock()
		if sr.missed > 0 || sr.dups > 0 || sr.disorder > 0 || sr.delivered != len(ids) {
			tb.Fatalf("%s, %s: %d rows, %d delivered, %d never, %d more than once, %d out of order for their key",
				s.form, st.process, len(ids), sr.delivered, sr.missed, sr.dups, sr.disorder)
		}
	}
}

// sampler reads inorder's table sizes every interval, and counts the checkpoint tables' truncations.
type sampler struct {
	since  time.Time
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	all    []sizes
	truncs int
	// marked is truncs when mark was called; truncatedAfter the tables truncated since.
	marked         int
	truncatedAfter map[string]bool
}

func startSampler(tb testing.TB, db *pgtest.DB, every time.Duration, since time.Time) *sampler {
	s := &sampler{since: since, stopCh: make(chan struct{}), done: make(chan struct{}), marked: -1,
		truncatedAfter: map[string]bool{}}
	ctx := context.Background()
	filenodes := func() map[string]int64 {
		m := map[string]int64{}
		rows, err := db.Pool.Query(ctx, `SELECT relname, relfilenode::bigint FROM pg_class
			WHERE relnamespace = 'inorder'::regnamespace AND relname LIKE 'checkpoint\__'`)
		if err != nil {
			return m
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var node int64
			if rows.Scan(&name, &node) == nil {
				m[name] = node
			}
		}
		return m
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		nodes := filenodes()
		for {
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
			sz, err := sizesNow(ctx, db, since)
			now := filenodes()
			s.mu.Lock()
			if err == nil {
				s.all = append(s.all, sz)
			}
			for k, v := range now {
				if old, ok := nodes[k]; ok && old != v {
					s.truncs++
					if s.marked >= 0 {
						s.truncatedAfter[k] = true
					}
				}
			}
			s.mu.Unlock()
			nodes = now
		}
	}()
	tb.Cleanup(func() { _, _ = s.stop() })
	return s
}

// mark returns the truncations seen so far, and starts counting the tables truncated after it.
func (s *sampler) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marked = s.truncs
	return s.truncs
}

// truncatedSinceMark returns the truncations seen since mark, and whether every checkpoint table was
// among them.
func (s *sampler) truncatedSinceMark() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.truncs - s.marked, len(s.truncatedAfter) == 3
}

// stop ends the sampling (once) and returns the samples and the truncations seen.
func (s *sampler) stop() ([]sizes, int) {
	select {
	case <-s.stopCh:
	default:
		close(s.stopCh)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all), s.truncs
}

func sizesNow(ctx context.Context, db *pgtest.DB, since time.Time) (sizes, error) {
	s := sizes{at: time.Since(since), tables: map[string]int64{}, entries: -1}
	// The partitions the rotation attaches for turns while a pg_dump holds the others count as one,
	// checkpoint_turns.
	rows, err := db.Pool.Query(ctx, `SELECT CASE WHEN c.relname ~ '^checkpoint_[0-9]{2,}$|^checkpoint_[3-9]$'
		       THEN 'checkpoint_turns' ELSE c.relname END, pg_total_relation_size(c.oid), c.relname ~ '^checkpoint_[0-9]+$'
		FROM pg_class c
		WHERE c.relnamespace = 'inorder'::regnamespace AND c.relkind = 'r'
		  AND (c.relname = ANY($1) OR c.relname ~ '^checkpoint_[0-9]+$')`, inorderTables)
	if err != nil {
		return s, err
	}
	var checkpoints []string
	for rows.Next() {
		var name string
		var n int64
		var cp bool
		if err := rows.Scan(&name, &n, &cp); err != nil {
			rows.Close()
			return s, err
		}
		s.tables[name] += n
		if cp && name != "checkpoint_turns" {
			checkpoints = append(checkpoints, "(SELECT count(*) FROM inorder."+name+")")
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if len(checkpoints) > 0 { // the turns' partitions' entries too, through the parent
		checkpoints = append(checkpoints, "(SELECT count(*) FROM inorder.checkpoint WHERE slot >= 3)")
		err = db.Pool.QueryRow(ctx, "SELECT "+strings.Join(checkpoints, " + ")).Scan(&s.entries)
	}
	return s, err
}

func readSizes(tb testing.TB, db *pgtest.DB, since time.Time) sizes {
	tb.Helper()
	s, err := sizesNow(context.Background(), db, since)
	if err != nil {
		tb.Fatalf("sizes: %v", err)
	}
	return s
}

// qualifiedInorderTables lists those of inorderTables the schema has, for VACUUM.
func qualifiedInorderTables(tb testing.TB, db *pgtest.DB) string {
	var list string
	if err := db.Pool.QueryRow(context.Background(), `SELECT string_agg('inorder.' || quote_ident(relname), ', ')
		FROM pg_class WHERE relnamespace = 'inorder'::regnamespace AND relkind = 'r' AND relname = ANY($1)`,
		inorderTables).Scan(&list); err != nil {
		tb.Fatalf("inorder's tables: %v", err)
	}
	return list
}

// checkpointEntries counts the entries of the checkpoint tables (0 before the checkpoint log).
func checkpointEntries(tb testing.TB, db *pgtest.DB) int64 {
	tb.Helper()
	s := readSizes(tb, db, time.Now())
	return max(s.entries, 0)
}

var vacuumTuples = regexp.MustCompile(`tuples: \d+ removed, \d+ remain, (\d+) are dead but not yet removable`)
var vacuumCutoff = regexp.MustCompile(`removable cutoff: \d+, which was (\d+) XIDs old`)

// vacuumVerbose vacuums table and returns the row versions it found dead but not yet removable, and how
// old (in transactions) its removable cutoff was: what a held snapshot keeps.
func vacuumVerbose(tb testing.TB, db *pgtest.DB, table string) (dead, age int) {
	tb.Helper()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	var mu sync.Mutex
	var notices []string
	cc.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Message)
	}
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	exec(tb, conn, "VACUUM (VERBOSE) "+table)
	mu.Lock()
	defer mu.Unlock()
	dead, age = -1, -1
	for _, n := range notices {
		// The table's own report comes first, its TOAST table's after it.
		if m := vacuumTuples.FindStringSubmatch(n); m != nil && dead < 0 {
			dead, _ = strconv.Atoi(m[1])
		}
		if m := vacuumCutoff.FindStringSubmatch(n); m != nil && age < 0 {
			age, _ = strconv.Atoi(m[1])
		}
	}
	return dead, age
}

func readTableStats(tb testing.TB, db *pgtest.DB) map[string]tableStats {
	tb.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd,
		n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'inorder'`)
	if err != nil {
		tb.Fatalf("pg_stat_user_tables: %v", err)
	}
	defer rows.Close()
	m := map[string]tableStats{}
	for rows.Next() {
		var name string
		var s tableStats
		if err := rows.Scan(&name, &s.ins, &s.upd, &s.hot, &s.live, &s.dead, &s.autovacuums); err != nil {
			tb.Fatalf("pg_stat_user_tables: %v", err)
		}
		m[name] = s
	}
	return m
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }

// kib is n bytes in KiB.
func kib(n int64) float64 { return float64(n) / (1 << 10) }

// sizesText is s's tables in KiB, for the notes.
func sizesText(s sizes) string {
	parts := make([]string, 0, len(inorderTables))
	for _, t := range inorderTables {
		if v, ok := s.tables[t]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", t, thousands(kib(v))))
		}
	}
	return strings.Join(parts, ", ") + " KiB"
}

// pruneRun is what measurePrune measured on one side: the stream's latency before and during the prune,
// and its read from its position before and after.
type pruneRun struct {
	quietP50, quietP99, pruneP50, pruneP99 time.Duration
	quietRows, pruneRows                   int
	pruned                                 int64
	batches                                int
	took                                   time.Duration
	readBefore, readAfter                  figure // median read, µs
	writeRate                              float64
	planBefore, planAfter                  explained
}

// explained is what EXPLAIN (ANALYZE, BUFFERS) said of a read.
type explained struct {
	planning, execution  string // ms
	buffers, planBuffers string // of the top node, and of planning
}

var (
	explainExecution = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)
	explainPlanning  = regexp.MustCompile(`Planning Time: ([0-9.]+) ms`)
	explainBuffers   = regexp.MustCompile(`Buffers: (.+)`)
)

// explainRead runs EXPLAIN (ANALYZE, BUFFERS) of the processor's kind of read (readCostSQL) from at, id
// below horizon.
func explainRead(tb testing.TB, conn *pgx.Conn, at time.Time, id int64, horizon time.Time) explained {
	tb.Helper()
	rows, err := conn.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+readCostSQL, at, id, horizon)
	if err != nil {
		tb.Fatalf("explain: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("explain: %v", err)
	}
	var e explained
	planning := false
	for _, l := range lines {
		l = strings.TrimSpace(l)
		switch {
		case l == "Planning:":
			planning = true
		case explainBuffers.MatchString(l):
			m := explainBuffers.FindStringSubmatch(l)
			if planning && e.planBuffers == "" {
				e.planBuffers = m[1]
			} else if !planning && e.buffers == "" {
				e.buffers = m[1]
			}
		case explainPlanning.MatchString(l):
			e.planning = explainPlanning.FindStringSubmatch(l)[1]
		case explainExecution.MatchString(l):
			e.execution = explainExecution.FindStringSubmatch(l)[1]
		}
	}
	return e
}

// pruneSide is one side of the prune measure while it runs.
type pruneSide struct {
	form     holdForm
	db       *pgtest.DB
	lastAt   time.Time // the backlog's last row
	from     time.Time // the stream's first row, whose id is fromID
	fromID   int64
	ran      chan error
	stop     context.CancelFunc
	reader   *pgx.Conn
	hold     *hold
	mu       sync.Mutex
	handled  map[int64]time.Time
	commits  []commit
	flowErr  error
	run      pruneRun
	pruneErr error
}

func (s *pruneSide) seen(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.handled[id]
	return ok
}

func (s *pruneSide) alive() error {
	select {
	case err := <-s.ran:
		return fmt.Errorf("%s: the processor stopped: %v", s.form, err)
	default:
		return nil
	}
}

// timeReads times reads of the stream's kind from its first row, below a horizon of now, and returns the
// median in µs.
func (s *pruneSide) timeReads(tb testing.TB, reads int) figure {
	tb.Helper()
	ctx := context.Background()
	horizon := time.Now()
	ts := make([]time.Duration, 0, reads)
	for range reads {
		start := time.Now()
		rows, err := s.reader.Query(ctx, readCostSQL, s.from, s.fromID, horizon)
		if err != nil {
			tb.Fatalf("read: %v", err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			tb.Fatalf("read: %v", err)
		}
		ts = append(ts, time.Since(start))
		if n == 0 {
			tb.Fatalf("read: no rows after the stream's first")
		}
	}
	slices.Sort(ts)
	return figure{n: reads, value: float64(ts[len(ts)/2]) / float64(time.Microsecond), unit: micros}
}

// measurePrune runs, for each of forms at once, each on a database of its own, a stream with default
// flags (checkpoint record) that starts from now over an events table holding a backlog of backlog rows,
// which it has therefore passed; holds a snapshot as the form says; lets rows flow at rate for quiet; then
// prunes every side's backlog with cursor.Prune at the same moment while the rows keep flowing. It
// measures each stream's latency in the quiet time and during its prune, and times the stream's kind of
// read from its position (the first row that flowed) before and after the prune.
func measurePrune(tb testing.TB, forms []holdForm, backlog, rate int, quiet time.Duration, reads int) []pruneRun {
	tb.Helper()
	ctx := context.Background()
	sides := make([]*pruneSide, len(forms))
	var flowing sync.WaitGroup
	stopFlow := make(chan struct{})
	stopFlowing := sync.OnceFunc(func() { close(stopFlow); flowing.Wait() })
	defer stopFlowing()
	for i, form := range forms {
		s := &pruneSide{form: form, db: insertedEvents(tb, backlog), ran: make(chan error, 1), handled: map[int64]time.Time{}}
		sides[i] = s
		noteServer(tb, s.db.Pool)
		_, s.lastAt = lastRow(tb, s.db, "events")
		cc, err := pgx.ParseConfig(s.db.URL)
		if err != nil {
			tb.Fatalf("parse url: %v", err)
		}
		p, err := processor.New(processor.Config[event]{
			StartFrom:    inordertype.StartFromNow,
			Process:      "bench_prune",
			ClientConfig: processor.ClientConfig{ConnConfig: cc},
			Source:       inordertype.Source{Table: "events", Columns: eventColumns},
			Handler: handlers.HandlerFunc[event](func(_ context.Context, rec *handlers.Record[event]) error {
				at := time.Now()
				s.mu.Lock()
				s.handled[rec.Value.ID] = at
				s.mu.Unlock()
				return nil
			}),
		})
		if err != nil {
			tb.Fatalf("processor: %v", err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		s.stop = cancel
		defer cancel()
		go func() { s.ran <- p.Run(runCtx) }()
		// The process registers at now, after the backlog; its first row, inserted after, says that it runs.
		await(tb, "the process registered", time.Minute, func() (bool, error) {
			var there bool
			err := s.db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)",
				"bench_prune").Scan(&there)
			if err == nil && !there {
				err = s.alive()
			}
			return there, err
		})
		if err := s.db.Pool.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('warm', 0) RETURNING id, created_at").
			Scan(&s.fromID, &s.from); err != nil {
			tb.Fatalf("insert: %v", err)
		}
		await(tb, "the first row", time.Minute, func() (bool, error) { return s.seen(s.fromID), s.alive() })
		s.reader = connect(tb, s.db)
	}
	for _, s := range sides {
		s.hold = startHold(tb, s.db, s.form)
		defer func() { s.hold.release() }()
	}

	// The rows flow into every side, paced from the same start, each side's writers sharing the ticks.
	interval := time.Second / time.Duration(rate)
	flowStart := time.Now()
	for _, s := range sides {
		for w := range heldWriters {
			conn := connect(tb, s.db)
			flowing.Go(func() {
				for n := w; ; n += heldWriters {
					select {
					case <-stopFlow:
						return
					default:
					}
					if wait := time.Until(flowStart.Add(time.Duration(n) * interval)); wait > 0 {
						time.Sleep(wait)
					}
					var c commit
					err := conn.QueryRow(ctx, insertOneSQL, fmt.Sprintf("a%d", n%orderingKeys), n+1).Scan(&c.id)
					c.at = time.Now()
					s.mu.Lock()
					if err != nil {
						s.flowErr = err
						s.mu.Unlock()
						return
					}
					s.commits = append(s.commits, c)
					s.mu.Unlock()
				}
			})
		}
	}
	// The quiet time, and longer until a row has gone into every side: the writers connect after the
	// start, which on a busy machine can take the whole of a short quiet time.
	quietEnd := flowStart.Add(quiet)
	for {
		flowed := true
		for _, s := range sides {
			if err := s.alive(); err != nil {
				tb.Fatal(err)
			}
			s.mu.Lock()
			flowed = flowed && len(s.commits) > 0
			err := s.flowErr
			s.mu.Unlock()
			if err != nil {
				tb.Fatalf("insert: %v", err)
			}
		}
		if now := time.Now(); flowed && !now.Before(quietEnd) {
			quietEnd = now
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range sides {
		s.run.readBefore, s.run.planBefore = s.timeReads(tb, reads), explainRead(tb, s.reader, s.from, s.fromID, time.Now())
	}

	// The prunes, at once.
	var pruning sync.WaitGroup
	starts, ends := make([]time.Time, len(sides)), make([]time.Time, len(sides))
	for i, s := range sides {
		pruning.Go(func() {
			starts[i] = time.Now()
			res, err := cursor.Prune(ctx, s.db.Pool, cursor.PruneOpts{
				ActionOpts: cursor.ActionOpts{Actor: "bench", Reason: "the prune beside a stream"},
				Table:      "events",
				Before:     s.lastAt.Add(time.Microsecond),
			})
			ends[i] = time.Now()
			s.run.pruned, s.run.batches, s.run.took, s.pruneErr = res.Rows, res.Batches, ends[i].Sub(starts[i]), err
		})
	}
	pruning.Wait()
	for _, s := range sides {
		if s.pruneErr != nil {
			tb.Fatalf("prune (%s): %v", s.form, s.pruneErr)
		}
		if s.run.pruned != int64(backlog) {
			tb.Fatalf("prune (%s): %d rows deleted, want the backlog's %d", s.form, s.run.pruned, backlog)
		}
		s.run.readAfter, s.run.planAfter = s.timeReads(tb, reads), explainRead(tb, s.reader, s.from, s.fromID, time.Now())
	}
	stopFlowing()
	flowEnd := time.Now()

	runs := make([]pruneRun, len(sides))
	for i, s := range sides {
		if s.flowErr != nil {
			tb.Fatalf("insert: %v", s.flowErr)
		}
		s.run.writeRate = float64(len(s.commits)) / flowEnd.Sub(flowStart).Seconds()
		last := slices.MaxFunc(s.commits, func(a, b commit) int { return cmp.Compare(a.id, b.id) }).id
		await(tb, "the stream caught up", time.Minute, func() (bool, error) { return s.seen(last), s.alive() })
		s.mu.Lock()
		var quietLat, pruneLat []time.Duration
		for _, c := range s.commits {
			lat := max(s.handled[c.id].Sub(c.at), 0)
			switch {
			case c.at.Before(quietEnd):
				quietLat = append(quietLat, lat)
			case !c.at.Before(starts[i]) && c.at.Before(ends[i]):
				pruneLat = append(pruneLat, lat)
			}
		}
		s.mu.Unlock()
		s.run.quietRows, s.run.pruneRows = len(quietLat), len(pruneLat)
		if len(quietLat) > 0 {
			s.run.quietP50, s.run.quietP99 = percentiles(quietLat)
		}
		if len(pruneLat) > 0 {
			s.run.pruneP50, s.run.pruneP99 = percentiles(pruneLat)
		}
		s.hold.release()
		s.stop()
		if err := <-s.ran; err != nil {
			tb.Fatalf("processor: %v", err)
		}
		runs[i] = s.run
	}
	return runs
}

// bytesUnit is a size in bytes.
const bytesUnit = "B"

// snapNotes are the details of the held runs that the notes give. figuresMu guards them.
var snapNotes = struct {
	runs              map[string]heldRun
	prune, pruneClean *pruneRun
}{runs: map[string]heldRun{}}

func keepSnap(key string, r heldRun) {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	snapNotes.runs[key] = r
}

// snapshotLines are the lines of the measures with a snapshot held.
func snapshotLines() []line {
	flow := fmt.Sprintf("after %s at %s/s", heldFlow, thousands(heldRate))
	longFlow := fmt.Sprintf("after %s at %d/s", longHold, longRate)
	longSize := fmt.Sprintf("%s at %s/s", longSizeHold, thousands(longSizeRate))
	size := &target{ofValue: true, atMost: true, v: sizeTargetMiB}
	held, clean := "a pg_dump's snapshot and locks held", "no snapshot held"
	return []line{
		{key: "snap_record_clean", label: fmt.Sprintf("inorder burst of %s %s, default flags", thousands(heldBurstRecord), flow),
			ref: "commit", refLabel: "single-row commit"},
		{key: "snap_record", label: "the same, " + held, ref: "snap_record_clean", refLabel: clean, target: &target{v: 0.8}},
		{key: "snap_batch_clean", label: fmt.Sprintf("inorder burst of %s %s, checkpoint batch", thousands(heldBurstBatch), flow),
			ref: "keyset", refLabel: "keyset read"},
		{key: "snap_batch", label: "the same, " + held, ref: "snap_batch_clean", refLabel: clean, target: &target{v: 0.8}},
		{key: "snap_lat_clean_p50", label: fmt.Sprintf("latency at %s/s, default flags, the last %s of %s: p50",
			thousands(heldRate), heldWindow, heldFlow), ref: "poll", refLabel: "poll interval"},
		{key: "snap_lat_clean_p99", label: "the same: p99", ref: "poll", refLabel: "poll interval"},
		{key: "snap_lat_p50", label: "the same, " + held + ": p50", ref: "snap_lat_clean_p50", refLabel: clean},
		{key: "snap_lat_p99", label: "the same, " + held + ": p99", ref: "snap_lat_clean_p99", refLabel: clean},
		{key: "snap_size_clean_max", label: "inorder's tables in the same time, no snapshot held, at most", ref: "sizetarget",
			refLabel: "16 MiB"},
		{key: "snap_size_max", label: "inorder's tables while " + held + ", at most", ref: "sizetarget",
			refLabel: "16 MiB", target: size},
		{key: "snap_size_clean", label: "inorder's tables, no snapshot held, stopped, rotated, vacuumed", limit: true},
		{key: "snap_size_vacuum", label: "held: once the snapshot ended and a VACUUM ran", ref: "snap_size_clean", refLabel: "clean run"},
		{key: "snap_size_settled", label: "held: stopped, rotated, vacuumed", ref: "snap_size_clean", refLabel: "clean run",
			target: &target{atMost: true, v: 1}},
		{key: "prune_read_before", label: held + ": the stream's read from its position", limit: true},
		{key: "prune_read_after", label: fmt.Sprintf("the same after %s rows behind it were pruned", thousands(pruneBacklog)),
			ref: "prune_read_before", refLabel: "before the prune"},
		{key: "prune_clean_quiet_p50", label: fmt.Sprintf("latency at %s/s, default flags, no prune: p50", thousands(heldRate)),
			ref: "poll", refLabel: "poll interval"},
		{key: "prune_clean_quiet_p99", label: "the same: p99", ref: "poll", refLabel: "poll interval"},
		{key: "prune_clean_p50", label: fmt.Sprintf("the same while a prune of %s rows ran beside: p50", thousands(pruneBacklog)),
			ref: "prune_clean_quiet_p50", refLabel: "no prune"},
		{key: "prune_clean_p99", label: "the same while the prune ran beside: p99", ref: "prune_clean_quiet_p99", refLabel: "no prune"},
		{key: "prune_held_quiet_p50", label: held + ", no prune: p50", ref: "prune_clean_quiet_p50", refLabel: clean},
		{key: "prune_held_quiet_p99", label: held + ", no prune: p99", ref: "prune_clean_quiet_p99", refLabel: clean},
		{key: "prune_held_p50", label: held + ", the prune beside: p50", ref: "prune_clean_p50", refLabel: "the prune, " + clean},
		{key: "prune_held_p99", label: held + ", the prune beside: p99", ref: "prune_clean_p99", refLabel: "the prune, " + clean},

		{key: "long_record_clean", label: fmt.Sprintf("long: burst of %s %s, default flags", thousands(longBurst), longFlow), limit: true},
		{key: "long_record", label: "the same, ACCESS SHARE on every table and a snapshot held", ref: "long_record_clean",
			refLabel: clean, target: &target{v: 0.9}},
		{key: "long_batch_clean", label: fmt.Sprintf("long: burst of %s %s, checkpoint batch", thousands(longBurst), longFlow), limit: true},
		{key: "long_batch", label: "the same, ACCESS SHARE on every table and a snapshot held", ref: "long_batch_clean",
			refLabel: clean, target: &target{v: 0.8}},
		{key: "long_lat_clean_p50", label: fmt.Sprintf("long: latency at %d/s, default flags, the last minute: p50", longRate),
			ref: "poll", refLabel: "poll interval"},
		{key: "long_lat_clean_p99", label: "the same: p99", ref: "poll", refLabel: "poll interval"},
		{key: "long_lat_p50", label: "the same, the snapshot and locks held: p50", ref: "long_lat_clean_p50", refLabel: clean},
		{key: "long_lat_p99", label: "the same, the snapshot and locks held: p99", ref: "long_lat_clean_p99", refLabel: clean},
		{key: "long_size_clean_max", label: fmt.Sprintf("long: inorder's tables over %s, no snapshot, at most", longSize),
			ref: "sizetarget", refLabel: "16 MiB", target: size},
		{key: "long_size_dump_max", label: fmt.Sprintf("long: the same, %s, at most", held), ref: "sizetarget",
			refLabel: "16 MiB", target: size},
		{key: "long_size_snapshot_max", label: "long: the same, a snapshot only (no lock), at most", ref: "sizetarget",
			refLabel: "16 MiB", target: size},
		{key: "long_size_clean", label: "long: no snapshot: stopped, rotated, vacuumed", limit: true},
		{key: "long_size_dump_vacuum", label: "long: pg_dump's hold once it ended and a VACUUM ran", ref: "long_size_clean",
			refLabel: "clean run"},
		{key: "long_size_dump_settled", label: "long: pg_dump's hold: stopped, rotated, vacuumed", ref: "long_size_clean",
			refLabel: "clean run", target: &target{atMost: true, v: 1}},
		{key: "long_size_snapshot_settled", label: "long: a snapshot only: stopped, rotated, vacuumed", ref: "long_size_clean",
			refLabel: "clean run", target: &target{atMost: true, v: 1}},
		{key: "long_dump_per_entry", label: "long: checkpoint tables' growth per entry, pg_dump-like transaction", limit: true},
		{key: "long_pgdump_per_entry", label: "the same under a real pg_dump", ref: "long_dump_per_entry",
			refLabel: "pg_dump-like transaction"},
	}
}

// perEntry is the checkpoint tables' growth over the hold per entry appended meanwhile, in bytes.
func (r heldRun) perEntry() float64 {
	n := r.end.entries - r.start.entries
	if n <= 0 {
		return 0
	}
	return float64(r.end.checkpoints()-r.start.checkpoints()) / float64(n)
}

// BenchmarkSnapshotHeld measures the checkpoints and the latency with a snapshot held as pg_dump holds
// one, each beside the same run without it on another database at the same time, then a prune beside a
// stream under the same hold.
func BenchmarkSnapshotHeld(b *testing.B) {
	pair := func(b *testing.B, name string, s heldStreamOpts, settle time.Duration) (clean, held heldRun) {
		runs := measureHeld(b, heldOpts{name: name, forms: []holdForm{holdNone, holdDump},
			streams: []heldStreamOpts{s}, rate: heldRate, writers: heldWriters, flow: heldFlow, window: heldWindow,
			sample: heldSample, settle: settle})
		return runs[0], runs[1]
	}
	latency := func(b *testing.B, key string, s heldStreamRun) {
		recordFigure(b, key+"_p50", figure{n: s.windowRows, value: ms(s.p50), unit: millis})
		recordFigure(b, key+"_p99", figure{n: s.windowRows, value: ms(s.p99), unit: millis})
	}
	b.Run("record", func(b *testing.B) {
		clean, held := pair(b, "record", heldStreamOpts{checkpoint: processor.CheckpointRecord,
			burst: heldBurstRecord, bursts: heldBursts}, heldSettle)
		record(b, "snap_record_clean", clean.streams[0].drain())
		record(b, "snap_record", held.streams[0].drain())
		latency(b, "snap_lat_clean", clean.streams[0])
		latency(b, "snap_lat", held.streams[0])
		recordFigure(b, "snap_size_clean_max", figure{value: mib(clean.maxSize.total()), unit: mebibytes})
		recordFigure(b, "snap_size_max", figure{value: mib(held.maxSize.total()), unit: mebibytes})
		recordFigure(b, "snap_size_clean", figure{value: mib(clean.settledSizes.total()), unit: mebibytes})
		recordFigure(b, "snap_size_vacuum", figure{value: mib(held.vacuumed.total()), unit: mebibytes})
		recordFigure(b, "snap_size_settled", figure{value: mib(held.settledSizes.total()), unit: mebibytes})
		keepSnap("record_clean", clean)
		keepSnap("record_held", held)
	})
	b.Run("batch", func(b *testing.B) {
		clean, held := pair(b, "batch", heldStreamOpts{checkpoint: processor.CheckpointBatch,
			burst: heldBurstBatch, bursts: heldBatchBursts}, 0)
		record(b, "snap_batch_clean", clean.streams[0].drain())
		record(b, "snap_batch", held.streams[0].drain())
		keepSnap("batch_clean", clean)
		keepSnap("batch_held", held)
	})
	b.Run("prune", func(b *testing.B) {
		runs := measurePrune(b, []holdForm{holdNone, holdDump}, pruneBacklog, heldRate, pruneQuiet, pruneReads)
		for i, key := range []string{"prune_clean", "prune_held"} {
			p := runs[i]
			if p.quietRows == 0 || p.pruneRows == 0 {
				b.Fatalf("prune: %d rows flowed before it, %d during it", p.quietRows, p.pruneRows)
			}
			recordFigure(b, key+"_quiet_p50", figure{n: p.quietRows, value: ms(p.quietP50), unit: millis})
			recordFigure(b, key+"_quiet_p99", figure{n: p.quietRows, value: ms(p.quietP99), unit: millis})
			recordFigure(b, key+"_p50", figure{n: p.pruneRows, value: ms(p.pruneP50), unit: millis})
			recordFigure(b, key+"_p99", figure{n: p.pruneRows, value: ms(p.pruneP99), unit: millis})
		}
		recordFigure(b, "prune_read_before", runs[1].readBefore)
		recordFigure(b, "prune_read_after", runs[1].readAfter)
		figuresMu.Lock()
		defer figuresMu.Unlock()
		snapNotes.pruneClean, snapNotes.prune = &runs[0], &runs[1]
	})
}

// BenchmarkSnapshotLong runs the long scenarios (INORDER_BENCH_LONG=1; `make bench-long`): a snapshot held
// for five minutes with ACCESS SHARE on every table while rows flow, then bursts, with default flags and
// checkpoint batch, beside the same without it; inorder's tables' sizes over a ten-minute hold at 1,000
// records/s, with pg_dump's locks and with a snapshot only, beside no hold; and a real pg_dump beside the
// transaction that stands for it.
func BenchmarkSnapshotLong(b *testing.B) {
	if os.Getenv(longEnv) == "" {
		b.Skipf("the long scenarios run with %s=1 (make bench-long)", longEnv)
	}
	b.Run("accept", func(b *testing.B) {
		runs := measureHeld(b, heldOpts{name: "accept", forms: []holdForm{holdNone, holdDump}, rate: longRate,
			writers: heldWriters, flow: longHold, window: time.Minute, sample: longSample, after: longAfter, settle: heldSettle, minutes: true,
			streams: []heldStreamOpts{
				{checkpoint: processor.CheckpointRecord, burst: longBurst, bursts: longBursts},
				{checkpoint: processor.CheckpointBatch, burst: longBurst, bursts: longBatchBursts},
			}})
		clean, held := runs[0], runs[1]
		record(b, "long_record_clean", clean.streams[0].drain())
		record(b, "long_record", held.streams[0].drain())
		record(b, "long_batch_clean", clean.streams[1].drain())
		record(b, "long_batch", held.streams[1].drain())
		for key, r := range map[string]heldRun{"long_lat_clean": clean, "long_lat": held} {
			recordFigure(b, key+"_p50", figure{n: r.streams[0].windowRows, value: ms(r.streams[0].p50), unit: millis})
			recordFigure(b, key+"_p99", figure{n: r.streams[0].windowRows, value: ms(r.streams[0].p99), unit: millis})
		}
		keepSnap("long_clean", clean)
		keepSnap("long_held", held)
	})
	b.Run("sizes", func(b *testing.B) {
		runs := measureHeld(b, heldOpts{name: "sizes", forms: []holdForm{holdNone, holdDump, holdSnapshot},
			rate: longSizeRate, writers: heldWriters, flow: longSizeHold, window: time.Minute, sample: longSample, after: longAfter,
			settle: heldSettle, minutes: true,
			streams: []heldStreamOpts{{checkpoint: processor.CheckpointRecord, burst: longBurst, bursts: 1}}})
		clean, dump, snap := runs[0], runs[1], runs[2]
		recordFigure(b, "long_size_clean_max", figure{value: mib(clean.maxSize.total()), unit: mebibytes})
		recordFigure(b, "long_size_clean", figure{value: mib(clean.settledSizes.total()), unit: mebibytes})
		recordFigure(b, "long_size_dump_max", figure{value: mib(dump.maxSize.total()), unit: mebibytes})
		recordFigure(b, "long_size_dump_vacuum", figure{value: mib(dump.vacuumed.total()), unit: mebibytes})
		recordFigure(b, "long_size_dump_settled", figure{value: mib(dump.settledSizes.total()), unit: mebibytes})
		recordFigure(b, "long_size_snapshot_max", figure{value: mib(snap.maxSize.total()), unit: mebibytes})
		recordFigure(b, "long_size_snapshot_settled", figure{value: mib(snap.settledSizes.total()), unit: mebibytes})
		keepSnap("size_none", clean)
		keepSnap("size_dump", dump)
		keepSnap("size_snapshot", snap)
	})
	b.Run("pg_dump", func(b *testing.B) {
		runs := measureHeld(b, heldOpts{name: "pgdump", forms: []holdForm{holdDump, holdPgDump},
			rate: longSizeRate, writers: heldWriters, flow: longDumpHold, window: time.Minute, sample: longSample, settle: heldSettle,
			streams: []heldStreamOpts{{checkpoint: processor.CheckpointRecord, burst: longBurst, bursts: 1}}})
		recordFigure(b, "long_dump_per_entry", figure{value: runs[0].perEntry(), unit: bytesUnit})
		recordFigure(b, "long_pgdump_per_entry", figure{value: runs[1].perEntry(), unit: bytesUnit})
		keepSnap("dump_tx", runs[0])
		keepSnap("dump_real", runs[1])
	})
}

// snapshotNote is the footnote on the held lines, given when they were measured.
func snapshotNote(note func(format string, args ...any)) {
	runs := snapNotes.runs
	if held, ok := runs["record_held"]; ok {
		clean := runs["record_clean"]
		note("snapshot held: two fresh databases at once, each with one process with the CLI's defaults (adaptive "+
			"batches from 100, the probe, PollInterval 200ms) but for the checkpoint, which delivers a first row; "+
			"then, in one of them, the hold: a transaction as pg_dump opens one (REPEATABLE READ, READ ONLY; a read "+
			"of the catalog takes its snapshot; then LOCK TABLE ... IN ACCESS SHARE MODE on each of the %d tables of "+
			"the database, one statement each, inorder's included). %d writers per database (a key always on the "+
			"same one) insert single rows, one transaction each, at %s/s for %s (%s/s achieved), paced from the "+
			"same start; once both streams have caught up, %d bursts "+
			"each, the databases taking turns, each burst one INSERT ... SELECT timed from its commit until "+
			"inorder.position holds its last row; the median counts. Latency: as in the latency lines, over the "+
			"rows of the flow's last %s. Every row was delivered once and in order per key (checked in every run). "+
			"Then the hold ends, inorder's tables are vacuumed, the processes stop (writing their positions into "+
			"their rows), and the rotation's steps (store.RotateCheckpoints, which the processors' prober takes "+
			"every 5s) are taken every second until the checkpoint tables are empty; then VACUUM again.",
			held.tables, heldWriters, thousands(heldRate), heldFlow, thousands(held.writeRate), heldBursts, heldWindow)
		note("snapshot held, default flags: bursts held %s; clean %s. At the end of the hold the checkpoint tables "+
			"held %s entries (clean: %s), %.0f bytes each; the rotation truncated a table %d times while it lasted "+
			"(clean: %d). VACUUM (VERBOSE) of inorder.cursor then found %d row versions dead but not yet removable, "+
			"the removable cutoff %d transactions old (clean: %d, %d). Sizes at the end of the hold: %s; once it "+
			"ended and a VACUUM ran: %s; stopped, rotated (%s%s) and vacuumed: %s. The clean run: at the end %s; "+
			"stopped, rotated, vacuumed: %s.", drainsText(held), drainsText(clean), thousands(float64(held.end.entries)),
			thousands(float64(clean.end.entries)), held.perEntry(), held.truncations, clean.truncations, held.cursorDead,
			held.cutoffAge, clean.cursorDead, clean.cutoffAge, sizesText(held.end), sizesText(held.vacuumed),
			held.settledIn.Round(time.Second), notSettled(held), sizesText(held.settledSizes), sizesText(clean.end),
			sizesText(clean.settledSizes))
		note("pg_stat_user_tables at the end of the hold, held (clean): inorder.cursor %s; checkpoint tables %s. "+
			"The rotation's lock (LOCK TABLE ... IN ACCESS EXCLUSIVE MODE NOWAIT) was then granted on %s "+
			"checkpoint tables held, %s clean.",
			statsText(held.stats["cursor"], clean.stats["cursor"]), checkpointStatsText(held.stats, clean.stats),
			lockText(held), lockText(clean))
	}
	if bh, ok := runs["batch_held"]; ok {
		bc := runs["batch_clean"]
		note("snapshot held, checkpoint batch: the same with %d bursts of %s rows: held %s; clean %s. The checkpoint "+
			"tables held %s entries at the end of the hold (clean: %s), %d truncations during it (clean: %d); "+
			"VACUUM (VERBOSE) of inorder.cursor: %d row versions not yet removable, the cutoff %d transactions old.",
			heldBatchBursts, thousands(heldBurstBatch), drainsText(bh), drainsText(bc), thousands(float64(bh.end.entries)),
			thousands(float64(bc.end.entries)), bh.truncations, bc.truncations, bh.cursorDead, bh.cutoffAge)
	}
	if p, c := snapNotes.prune, snapNotes.pruneClean; p != nil && c != nil {
		note("prune beside a stream: a %s-row events table that a process (default flags) registered after has "+
			"passed; rows flow at %s/s (%d writers; %s/s and %s/s achieved); after %s cursor.Prune deletes the "+
			"backlog (batches of 1000) while they keep "+
			"flowing; latency as in the latency lines, of the rows committed before the prune and while it ran. "+
			"Two databases at once, the rows flowing into both from the same start and the prunes starting "+
			"together: no snapshot held (the prune took %s, %d batches), and the same hold as pg_dump's from "+
			"before the rows flow until the end (%s, %d batches). The read: the processor's query (1000 rows "+
			"after the stream's first row, below a horizon of now), the median of %d with the snapshot held, "+
			"before and after the prune. EXPLAIN (ANALYZE, BUFFERS) of it before: planning %s ms "+
			"(%s), execution %s ms (%s); after: planning %s ms (%s), execution %s ms (%s).", thousands(pruneBacklog),
			thousands(heldRate), heldWriters, thousands(c.writeRate), thousands(p.writeRate), pruneQuiet, c.took.Round(10*time.Millisecond), c.batches, p.took.Round(10*time.Millisecond),
			p.batches, pruneReads, p.planBefore.planning, orNone(p.planBefore.planBuffers), p.planBefore.execution,
			orNone(p.planBefore.buffers), p.planAfter.planning, orNone(p.planAfter.planBuffers), p.planAfter.execution,
			orNone(p.planAfter.buffers))
	}
	if held, ok := runs["long_held"]; ok {
		clean := runs["long_clean"]
		note("long: two databases at once, each with two processes, one with default flags and one with checkpoint "+
			"batch, each on a table of its own; %d/s into each table for %s (%s/s achieved, %d writers per "+
			"database), one database with "+
			"the transaction as pg_dump's held (%d tables locked); then %d and %d bursts of %s rows into each table, the "+
			"databases taking turns, each drained before the next, the median counts (held: %s; clean: %s). Then "+
			"the hold ends and rows flow on for %s (%d truncations, every table among them: %t), the processes "+
			"stop and the rotation's steps empty the checkpoint tables. Latency of each minute, default flags, "+
			"p50/p99 ms, held: %s; clean: %s. Checkpoint entries at the end of the hold: %s held, %s clean; "+
			"truncations during it %d and %d; the rotation's lock granted at its end on %s checkpoint tables "+
			"held, %s clean; inorder.cursor's row versions not yet removable then: %d "+
			"(cutoff %d transactions old). Sizes at the end of the hold: %s; settled (%s%s): %s; clean: %s.",
			longRate, longHold, thousands(held.writeRate), heldWriters, held.tables, longBursts, longBatchBursts, thousands(longBurst), drainsText(held),
			drainsText(clean), longAfter, held.truncatedAfter, held.allTruncated, minutesText(held.streams[0]),
			minutesText(clean.streams[0]), thousands(float64(held.end.entries)), thousands(float64(clean.end.entries)),
			held.truncations, clean.truncations, lockText(held), lockText(clean), held.cursorDead, held.cutoffAge,
			sizesText(held.end),
			held.settledIn.Round(time.Second), notSettled(held), sizesText(held.settledSizes), sizesText(clean.settledSizes))
	}
	if _, ok := runs["size_dump"]; ok {
		note("long, sizes: three databases at once, one process each with default flags, %s/s for %s into each "+
			"(%s/s achieved, %d writers each), then a burst of %s; one with no hold, one with the transaction as pg_dump's, one with "+
			"a REPEATABLE READ transaction that has its snapshot and locks nothing. Then the holds end, rows flow "+
			"on for %s, the processes stop, and the rotation's steps empty the checkpoint tables.",
			thousands(longSizeRate), longSizeHold, thousands(runs["size_dump"].writeRate), heldWriters, thousands(longBurst), longAfter)
	}
	for _, k := range []string{"size_none", "size_dump", "size_snapshot", "dump_tx", "dump_real"} {
		r, ok := runs[k]
		if !ok {
			continue
		}
		var grew, after, minutes string
		if r.truncations == 0 {
			grew = fmt.Sprintf(", %.0f bytes per entry", r.perEntry())
		}
		if r.truncatedAfter > 0 || r.allTruncated {
			after = fmt.Sprintf(", %d in the rows after it (every table among them: %t)", r.truncatedAfter, r.allTruncated)
		}
		if len(r.streams[0].minutes) > 0 {
			minutes = " Latency of each minute p50/p99 ms: " + minutesText(r.streams[0]) + "."
		}
		note("long, %s (%s): inorder's tables every minute (MiB): %s; at most %.2f MiB at %s (%s); the checkpoint "+
			"tables held %s entries at the end of the hold%s, %d truncations during it%s; the rotation's lock "+
			"granted at its end on %s checkpoint tables; inorder.cursor's row versions not yet removable then: %d (cutoff %d transactions "+
			"old). Stopped, rotated (%s%s), vacuumed: %s.%s",
			k, holdText(r), sizeSeries(r), mib(r.maxSize.total()), r.maxSize.at.Round(time.Second), sizesText(r.maxSize),
			thousands(float64(r.end.entries)), grew, r.truncations, after, lockText(r), r.cursorDead, r.cutoffAge,
			r.settledIn.Round(time.Second), notSettled(r), sizesText(r.settledSizes), minutes)
	}
}

func holdText(r heldRun) string {
	switch r.form {
	case holdDump:
		return fmt.Sprintf("a transaction as pg_dump's (%d tables locked)", r.tables)
	case holdSnapshot:
		return "a REPEATABLE READ transaction with its snapshot, no table locked"
	case holdNone:
		return "no hold"
	case holdPgDump:
		return fmt.Sprintf("a real pg_dump blocked writing its output (%d tables locked)", r.tables)
	}
	return "none"
}

// lockableCheckpoints counts the checkpoint tables whose lock is granted at once to LOCK TABLE ... IN ACCESS
// EXCLUSIVE MODE NOWAIT, as the rotation takes it before it empties one (each in a transaction rolled back
// at once), -1 when there are none, and names the sessions holding a lock on those it was refused.
func lockableCheckpoints(tb testing.TB, db *pgtest.DB, hold *hold) (int, []string) {
	tb.Helper()
	if !hasCheckpointLog(tb, db) {
		return -1, nil
	}
	ctx := context.Background()
	conn := connect(tb, db)
	n := 0
	var holders []string
	for i := range 3 {
		table := fmt.Sprintf("inorder.checkpoint_%d", i)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE NOWAIT")
			return err
		})
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			n++
		case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
			rows, err := db.Pool.Query(ctx, `SELECT DISTINCT CASE WHEN a.pid = $2 THEN 'the hold'
					ELSE coalesce(nullif(a.application_name, ''), 'a session') END || ' (' || l.mode || ', ' || a.state || ')'
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				  AND l.relation = $1::regclass AND l.granted AND a.pid <> pg_backend_pid()`, table, int64(hold.pid))
			if err != nil {
				tb.Fatalf("lock holders: %v", err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				tb.Fatalf("lock holders: %v", err)
			}
			for _, name := range names {
				if !slices.Contains(holders, name) {
					holders = append(holders, name)
				}
			}
		default:
			tb.Fatalf("lock %s: %v", table, err)
		}
	}
	return n, holders
}

// hasCheckpointLog reports whether db has the checkpoint tables (migration 13).
func hasCheckpointLog(tb testing.TB, db *pgtest.DB) bool {
	tb.Helper()
	var has bool
	if err := db.Pool.QueryRow(context.Background(),
		"SELECT to_regclass('inorder.checkpoint_0') IS NOT NULL").Scan(&has); err != nil {
		tb.Fatalf("checkpoint log: %v", err)
	}
	return has
}

// lockText says on how many checkpoint tables the rotation's lock was granted.
func lockText(r heldRun) string {
	if r.lockable < 0 {
		return "no checkpoint tables"
	}
	if len(r.lockHolders) == 0 {
		return fmt.Sprintf("%d of 3", r.lockable)
	}
	return fmt.Sprintf("%d of 3 (held by %s)", r.lockable, strings.Join(r.lockHolders, ", "))
}

func notSettled(r heldRun) string {
	if r.settled {
		return ""
	}
	return ", not settled by then"
}

func orNone(s string) string {
	if s == "" {
		return "no buffers"
	}
	return s
}

func statsText(h, c tableStats) string {
	return fmt.Sprintf("%s updates (%s HOT), %s dead tuples (%s, %s, %s; %s)", thousands(float64(h.upd)),
		thousands(float64(h.hot)), thousands(float64(h.dead)), thousands(float64(c.upd)), thousands(float64(c.hot)),
		thousands(float64(c.dead)), fmt.Sprintf("autovacuums %d and %d", h.autovacuums, c.autovacuums))
}

func checkpointStatsText(h, c map[string]tableStats) string {
	var hi, ci, hd, cd int64
	for _, t := range []string{"checkpoint_0", "checkpoint_1", "checkpoint_2"} {
		hi, ci, hd, cd = hi+h[t].ins, ci+c[t].ins, hd+h[t].dead, cd+c[t].dead
	}
	return fmt.Sprintf("%s inserts (%s), %s dead tuples (%s)", thousands(float64(hi)), thousands(float64(ci)),
		thousands(float64(hd)), thousands(float64(cd)))
}

func drainsText(r heldRun) string {
	var parts []string
	for _, s := range r.streams {
		ds := make([]string, len(s.drains))
		for i, d := range s.drains {
			ds[i] = msText(d)
		}
		parts = append(parts, fmt.Sprintf("%s %s ms", s.opts.checkpoint, strings.Join(ds, ", ")))
	}
	return strings.Join(parts, "; ")
}

func minutesText(s heldStreamRun) string {
	parts := make([]string, len(s.minutes))
	for i, m := range s.minutes {
		parts[i] = msText(m[0]) + "/" + msText(m[1])
	}
	return strings.Join(parts, ", ")
}

// sizeSeries is the total of the sample nearest each minute of the hold.
func sizeSeries(r heldRun) string {
	var parts []string
	next := time.Minute
	for _, s := range r.samples {
		if s.at >= next {
			parts = append(parts, fmt.Sprintf("%.2f", mib(s.total())))
			next += time.Minute
		}
	}
	return strings.Join(parts, ", ")
}

// testSnapshotMeasures runs the held measures on a few rows, for TestMeasures.
func testSnapshotMeasures(t *testing.T) {
	forms := []holdForm{holdNone, holdDump, holdSnapshot}
	if bin, err := pgcluster.FindBinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(bin, "pg_dump")); err == nil {
			forms = append(forms, holdPgDump)
		}
	}
	runs := measureHeld(t, heldOpts{name: "test", forms: forms, rate: 100, writers: 2, flow: time.Second, window: time.Second,
		sample: 100 * time.Millisecond, after: time.Second, settle: time.Second,
		streams: []heldStreamOpts{
			{checkpoint: processor.CheckpointRecord, burst: 200, bursts: 2},
			{checkpoint: processor.CheckpointBatch, burst: 500, bursts: 1},
		}})
	for i, r := range runs {
		if r.form != forms[i] || len(r.streams) != 2 || r.streams[0].drain().rate() <= 0 || r.streams[1].drain().rate() <= 0 ||
			r.end.total() <= 0 || r.settledSizes.total() <= 0 {
			t.Errorf("held run %s: %+v", forms[i], r)
		}
		if r.form == holdDump && r.tables == 0 {
			t.Errorf("held run %s: no table locked", r.form)
		}
	}
	for _, p := range measurePrune(t, []holdForm{holdNone, holdDump}, 3000, 200, 500*time.Millisecond, 5) {
		if p.pruned != 3000 || p.readBefore.value <= 0 || p.readAfter.value <= 0 || p.quietRows == 0 {
			t.Errorf("prune: %+v", p)
		}
	}
}
