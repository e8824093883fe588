package fault

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// TestFaults runs every scenario; see the package documentation.
func TestFaults(t *testing.T) {
	t.Run("sigkill", func(t *testing.T) { t.Parallel(); sigkill(t) })
	t.Run("terminate_backend", func(t *testing.T) { t.Parallel(); terminateBackend(t) })
	t.Run("server_restart", func(t *testing.T) { t.Parallel(); serverRestart(t) })
	t.Run("server_crash", func(t *testing.T) { t.Parallel(); serverCrash(t) })
	t.Run("sigterm_in_flight", func(t *testing.T) { t.Parallel(); sigtermInFlight(t) })
	t.Run("frozen_owner", func(t *testing.T) { t.Parallel(); frozenOwner(t) })
	t.Run("crowded_lock_table", func(t *testing.T) { t.Parallel(); crowdedLockTable(t) })
	t.Run("pooled_transaction", func(t *testing.T) { t.Parallel(); pooled(t, pgbouncer.Transaction) })
	t.Run("pooled_session", func(t *testing.T) { t.Parallel(); pooled(t, pgbouncer.Session) })
	t.Run("failover", func(t *testing.T) { t.Parallel(); failover(t) })
	t.Run("dead_connection", func(t *testing.T) { t.Parallel(); deadConnection(t) })
	t.Run("busy_owner_cut", func(t *testing.T) { t.Parallel(); busyOwnerCut(t) })
	t.Run("upgrade", func(t *testing.T) { t.Parallel(); upgrade(t) })
	t.Run("held_snapshot", func(t *testing.T) { t.Parallel(); heldSnapshot(t) })
	t.Run("big_rows", func(t *testing.T) { t.Parallel(); bigRows(t) })
}

// writerCount is how many writer goroutines a scenario runs.
var writerCount = pick(4, 5)

// warmup waits until every stream has delivered something, so that faults hit working processors.
func (w *world) warmup(sts []stream) {
	w.t.Helper()
	for _, st := range sts {
		w.await(st.process+" to deliver", time.Minute, func() bool { return w.sink.count(st.process) >= 10 })
	}
}

// awaitStarted waits for the request a gate holds and returns it.
func (w *world) awaitStarted(g *gate) delivery {
	w.t.Helper()
	select {
	case d := <-g.started:
		return d
	case <-time.After(time.Minute):
		w.t.Fatalf("no request from %s within a minute", g.process)
		return delivery{}
	}
}

// calm lets the writers go on for a while after the last fault, before they stop.
func (w *world) calm() {
	w.sleep(pick(300*time.Millisecond, time.Second), pick(600*time.Millisecond, 2*time.Second))
}

// stopCleanly sends SIGTERM to each child and expects exit code 0.
func (w *world) stopCleanly(kids ...*child) {
	w.t.Helper()
	for _, c := range kids {
		if !c.running() {
			w.t.Errorf("%s exited by itself (code %d)", c.name, c.cmd.ProcessState.ExitCode())
			continue
		}
		c.signal(w.t, syscall.SIGTERM)
	}
	for _, c := range kids {
		if code := c.wait(w.t, 30*time.Second); code != 0 {
			w.t.Errorf("%s exited with code %d after SIGTERM", c.name, code)
		}
	}
}

// sigkill kills the owner of each stream with SIGKILL at random points, again and again, and starts a
// new instance each time; a second instance always stands by, so every kill is a takeover.
func sigkill(t *testing.T) {
	w := sharedWorld(t, "sigkill")
	sts := streamsFor("sigkill", "txn")
	w.write(writerCount)
	for _, st := range sts {
		w.start(st)
		w.start(st)
	}
	w.warmup(sts)
	crashes := map[string]int{}
	kills := pick(8, 30) * len(sts)
	for i := range kills {
		st := sts[i%len(sts)]
		w.sleep(100*time.Millisecond, 400*time.Millisecond)
		var g *gate
		if i%3 == 2 { // every third kill while the receiver holds a request of the owner's open
			g = w.sink.hold(st.process)
			w.awaitStarted(g)
		}
		victim := w.owner(st)
		if victim == nil { // between owners: kill either
			live := w.live(st)
			require.NotEmpty(t, live)
			victim = live[w.rng.IntN(len(live))]
		}
		victim.signal(t, syscall.SIGKILL)
		victim.wait(t, 10*time.Second)
		if g != nil {
			g.open()
		}
		crashes[st.process]++
		w.start(st)
	}
	w.calm()
	w.finish(sts, crashes)
}

// terminateBackend ends the cursor backend of each stream's processor with pg_terminate_backend, mid-batch
// when it can catch it in a transaction; the same child must reconnect and go on.
func terminateBackend(t *testing.T) {
	w := sharedWorld(t, "terminate_backend")
	sts := streamsFor("terminate_backend", "batch")
	w.write(writerCount)
	kids := map[string]*child{}
	for _, st := range sts {
		kids[st.process] = w.start(st)
	}
	w.warmup(sts)
	crashes := map[string]int{}
	inTx := 0
	n := pick(8, 30) * len(sts)
	for i := range n {
		st := sts[i%len(sts)]
		c := kids[st.process]
		w.sleep(100*time.Millisecond, 400*time.Millisecond)
		before := c.count("reconnected")
		var g *gate
		if i%2 == 1 { // every other time while the receiver holds a request open: mid-handler
			g = w.sink.hold(st.process)
			w.awaitStarted(g)
		}
		ended, midBatch := w.terminate(st)
		if g != nil {
			g.open()
		}
		if !ended {
			continue
		}
		crashes[st.process]++
		if midBatch {
			inTx++
		}
		w.await(c.name+" to reconnect", 30*time.Second, func() bool { return c.count("reconnected") > before })
	}
	t.Logf("%d backends ended, %d of them inside a transaction", n, inTx)
	w.calm()
	for _, c := range kids {
		require.True(t, c.running(), "%s exited", c.name)
	}
	w.finish(sts, crashes)
	for _, c := range kids {
		w.stopCleanly(c)
	}
}

// terminate ends st's cursor backend, waiting up to 300ms to catch it inside a transaction. It reports
// whether a backend was ended, and whether it was in a transaction.
func (w *world) terminate(st stream) (ended, inTx bool) {
	ctx := context.Background()
	deadline := time.Now().Add(300 * time.Millisecond)
	for {
		var pid int
		err := w.pool.QueryRow(ctx, `
			SELECT pid, xact_start IS NOT NULL FROM pg_stat_activity
			WHERE datname = current_database() AND starts_with(application_name, $1)
			ORDER BY xact_start IS NOT NULL DESC LIMIT 1`, "inorder:"+st.process+"@").Scan(&pid, &inTx)
		late := time.Now().After(deadline)
		if err == nil && (inTx || late) {
			// Only while the backend still carries the process's name: a pool connection carries it for
			// the length of the process's transaction alone (SET LOCAL), and one whose transaction ended
			// meanwhile is the pool's, idle, which the pool replaces without the processor noticing.
			// A CASE, since Postgres does not promise to evaluate AND's operands in order.
			require.NoError(w.t, w.pool.QueryRow(ctx, `SELECT coalesce(bool_or(CASE WHEN starts_with(application_name, $2)
				THEN pg_terminate_backend(pid) ELSE false END), false) FROM pg_stat_activity WHERE pid = $1`,
				pid, "inorder:"+st.process+"@").Scan(&ended))
			return ended, inTx
		}
		if late {
			return false, false
		}
		time.Sleep(time.Millisecond)
	}
}

// serverRestart stops and starts the PostgreSQL server (a cluster of its own) under running processors
// and writers.
func serverRestart(t *testing.T) {
	w, c := ownWorld(t, "server_restart")
	underServerFaults(w, streamsFor("server_restart", "record"), "restarted", func() error {
		return c.Restart(context.Background(), time.Second)
	})
}

// serverCrash stops the PostgreSQL server at once (immediate shutdown: the WAL not yet written is lost)
// under running processors and writers, and starts it again, with each kind of position commit: the
// default (synchronous_commit off for positions, which may lose the last few hundred milliseconds of them
// and deliver those records again) and --synchronous-commit (at most the record in flight again), per
// record and per batch. The server itself commits synchronously, so that every row the writers saw
// commit survives: what a crash may take back is only inorder's own positions.
func serverCrash(t *testing.T) {
	w, c := ownWorldWith(t, "server_crash", map[string]string{"synchronous_commit": "on"})
	sts := []stream{
		{process: "server_crash_record", checkpoint: "record", batch: 20, horizon: "auto", slack: asyncCommitSlack},
		{process: "server_crash_record_sync", checkpoint: "record", batch: 20, horizon: "auto", syncCommit: true},
	}
	if full {
		sts = append(sts,
			stream{process: "server_crash_batch", checkpoint: "batch", batch: 20, horizon: "auto", slack: asyncCommitSlack},
			stream{process: "server_crash_batch_sync", checkpoint: "batch", batch: 20, horizon: "auto", syncCommit: true})
	}
	underServerFaults(w, sts, "crashed and recovered", func() error {
		return c.Crash(context.Background(), 500*time.Millisecond)
	})
}

// underServerFaults runs the streams with writers and injects fault, something done to the whole server,
// two or three times; after each, every processor must reconnect and deliver again. Then every stream is
// checked.
func underServerFaults(w *world, sts []stream, what string, fault func() error) {
	t := w.t
	w.write(writerCount)
	kids := map[string]*child{}
	for _, st := range sts {
		kids[st.process] = w.start(st)
	}
	w.warmup(sts)
	crashes := map[string]int{}
	for range pick(2, 3) {
		w.sleep(500*time.Millisecond, 1500*time.Millisecond)
		reconnected := map[string]int{}
		for _, st := range sts {
			reconnected[st.process] = kids[st.process].count("reconnected")
		}
		start := time.Now()
		require.NoError(t, fault())
		t.Logf("server %s in %s", what, time.Since(start).Round(time.Millisecond))
		for _, st := range sts {
			crashes[st.process]++
			k := kids[st.process]
			w.await(k.name+" to reconnect", time.Minute, func() bool { return k.count("reconnected") > reconnected[st.process] })
			n := w.sink.count(st.process)
			w.await(k.name+" to deliver again", time.Minute, func() bool { return w.sink.count(st.process) > n })
		}
	}
	w.calm()
	for _, k := range kids {
		require.True(t, k.running(), "%s exited", k.name)
	}
	w.finish(sts, crashes)
	for _, k := range kids {
		w.stopCleanly(k)
	}
}

// asyncCommitSlack bounds the redeliveries a crash of the server may cause beyond the checkpoint's own to
// a stream whose positions commit without waiting for their flush: the records delivered in the last few
// hundred milliseconds before it.
const asyncCommitSlack = 2000

// ownWorld makes a world on a cluster of its own, for a scenario that does something to the whole server.
func ownWorld(t *testing.T, name string) (*world, *pgcluster.Cluster) {
	return ownWorldWith(t, name, nil)
}

// ownWorldWith is ownWorld with server settings over the fault suite's own.
func ownWorldWith(t *testing.T, name string, settings map[string]string) (*world, *pgcluster.Cluster) {
	c, serverLog := ownCluster(t, "server", settings)
	w := newWorld(t, name, c.URL("fault"))
	w.dumps = append(w.dumps, serverLog)
	return w, c
}

// ownCluster starts a cluster of the scenario's own with a database named fault, stopped when the test
// ends; the function returned gives the tail of the server's log, headed by who.
func ownCluster(t *testing.T, who string, over map[string]string) (*pgcluster.Cluster, func() string) {
	ctx := context.Background()
	var logMu sync.Mutex
	var serverLog []string
	settings := map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
		"track_commit_timestamp": "on"} // for explainLost
	for k, v := range over {
		settings[k] = v
	}
	c, err := pgcluster.Start(ctx, pgcluster.Config{
		Settings: settings,
		LogFunc: func(line string) {
			logMu.Lock()
			serverLog = append(serverLog, line)
			logMu.Unlock()
		},
	})
	if errors.Is(err, pgcluster.ErrNoServer) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE fault")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	return c, func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return who + " log:\n" + tail(strings.Join(serverLog, "\n"), 60)
	}
}

// crowdedLockTable runs processors on a server whose lock table is crowded: another session holds 20,000
// advisory locks, as an application with many advisory locks or a transaction over many partitions does.
// Reading pg_locks then takes tens of milliseconds, far more than the --insert-latency guard; the horizon
// must hold however long that read takes. No other fault is injected.
func crowdedLockTable(t *testing.T) {
	ctx := context.Background()
	w, _ := ownWorld(t, "crowded_lock_table")
	holder, err := pgx.Connect(ctx, w.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	_, err = holder.Exec(ctx, "SELECT count(pg_advisory_lock(-g)) FROM generate_series(1, 20000) g")
	require.NoError(t, err)
	var took time.Duration
	require.NoError(t, w.pool.QueryRow(ctx, `
		SELECT clock_timestamp() - statement_timestamp() FROM (SELECT 1) AS one
		LEFT JOIN pg_locks AS l ON l.locktype = 'relation' AND l.relation = 'events'::regclass`).Scan(&took))
	t.Logf("a statement reading pg_locks evaluates clock_timestamp() %s after it starts", took.Round(time.Microsecond))

	sts := streamsFor("crowded_lock_table", "txn")
	w.write(writerCount)
	for _, st := range sts {
		w.start(st)
	}
	w.warmup(sts)
	time.Sleep(pick(4*time.Second, 15*time.Second)) // no fault but the crowd: let the writers write
	w.finish(sts, map[string]int{})
}

// sigtermInFlight sends SIGTERM while the receiver holds a request open, then lets the request answer:
// the child must exit 0, and the record in flight be in the position or delivered again after restart.
func sigtermInFlight(t *testing.T) {
	w := sharedWorld(t, "sigterm_in_flight")
	sts := streamsFor("sigterm_in_flight", "batch")
	w.write(writerCount)
	cur := map[string]*child{}
	for _, st := range sts {
		cur[st.process] = w.start(st)
	}
	w.warmup(sts)
	type inflight struct {
		st  stream
		id  int64
		pos string
	}
	var rounds []inflight
	crashes := map[string]int{}
	n := pick(3, 6) * len(sts)
	for i := range n {
		st := sts[i%len(sts)]
		w.sleep(200*time.Millisecond, 600*time.Millisecond)
		g := w.sink.hold(st.process)
		d := w.awaitStarted(g)
		c := cur[st.process]
		stopping := c.count("stopping: finishing the records in flight")
		c.signal(t, syscall.SIGTERM)
		w.await(c.name+" to take the signal", 10*time.Second, func() bool {
			return c.count("stopping: finishing the records in flight") > stopping
		})
		g.open()
		if code := c.wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited with code %d after SIGTERM with record %d in flight", c.name, code, d.ID)
		}
		require.Contains(t, c.logs(), `"message":"cursor released"`)
		rounds = append(rounds, inflight{st, d.ID, w.position(st)})
		crashes[st.process]++
		cur[st.process] = w.start(st)
	}
	w.calm()
	reports := w.finish(sts, crashes)
	for _, r := range rounds {
		rep := reports[r.st.process]
		pos, err := strconv.ParseInt(r.pos, 10, 64)
		recorded := err == nil && rep.rank[pos] >= rep.rank[r.id]
		switch {
		case recorded:
			t.Logf("%s: record %d in flight at SIGTERM: in the position at exit (position %s)", r.st.process, r.id, r.pos)
		case rep.deliveries[r.id] >= 2:
			t.Logf("%s: record %d in flight at SIGTERM: delivered again after restart", r.st.process, r.id)
		default:
			t.Errorf("%s: record %d in flight at SIGTERM is neither in the position at exit (%s) nor delivered again",
				r.st.process, r.id, r.pos)
		}
	}
	for _, c := range cur {
		w.stopCleanly(c)
	}
}

// frozenOwner freezes the owner with SIGSTOP (every other time while its handler call is in flight) for
// longer than its lease and idle timeout, so that the standby takes over (PostgreSQL ends the session of
// one frozen holding the cursor row; the lease of one frozen between batches runs out), then thaws it
// with SIGCONT. No write of the thawed instance may land on the cursor row after the standby's
// first.
func frozenOwner(t *testing.T) {
	w := sharedWorld(t, "frozen_owner")
	sts := streamsFor("frozen_owner", "record")
	// A frozen instance loses the process within 2s wherever it stopped: holding the cursor row, its session
	// is ended by the idle timeout (and on this direct connection the standby sees the advisory lock free);
	// outside a transaction, its lease runs out.
	const lease, idle = 2 * time.Second, 2 * time.Second
	timeouts := []string{"--idle-timeout", idle.String(), "--lease", lease.String(), "--handler-timeout", "1500ms",
		"--webhook-timeout", "1s"}
	w.write(writerCount)
	for _, st := range sts {
		w.start(st, timeouts...)
		w.start(st, timeouts...)
	}
	w.warmup(sts)
	type episode struct {
		st               stream
		frozen, standby  *child
		from, to         int64
		midHandler       bool
		record           int64
		frozenFor, taken time.Duration
	}
	var episodes []episode
	crashes := map[string]int{}
	n := pick(2, 4) * len(sts)
	for i := range n {
		st := sts[i%len(sts)]
		w.sleep(200*time.Millisecond, 600*time.Millisecond)
		ep := episode{st: st, midHandler: (i/len(sts))%2 == 0, record: -1}
		if ep.midHandler {
			g := w.sink.hold(st.process)
			ep.record = w.awaitStarted(g).ID
			ep.frozen = w.owner(st) // the instance whose handler call the receiver holds
			require.NotNil(t, ep.frozen, "no owner while a request is in flight")
			ep.frozen.signal(t, syscall.SIGSTOP)
			g.open() // answered, but the frozen instance cannot read it
		} else {
			w.await("an owner", 30*time.Second, func() bool { ep.frozen = w.owner(st); return ep.frozen != nil })
			ep.frozen.signal(t, syscall.SIGSTOP)
		}
		frozenAt := time.Now()
		ep.from = w.auditMax()
		for _, c := range w.live(st) {
			if c != ep.frozen {
				ep.standby = c
			}
		}
		require.NotNil(t, ep.standby)
		standbyApp := "inorder:" + st.process + "@" + ep.standby.name
		lost := ep.frozen.count("database connection lost; reconnecting")
		reconnected := ep.frozen.count("reconnected")
		taken := ep.frozen.count("cursor taken by another instance; standing by")
		w.await(ep.standby.name+" to take over and write the cursor row", time.Minute, func() bool {
			var n int
			err := w.pool.QueryRow(context.Background(),
				"SELECT count(*) FROM fault_cursor_writes WHERE n > $1 AND app = $2", ep.from, standbyApp).Scan(&n)
			return err == nil && n > 0
		})
		ep.taken = time.Since(frozenAt)
		w.sleep(100*time.Millisecond, 300*time.Millisecond) // the standby goes on while the owner is frozen
		ep.frozen.signal(t, syscall.SIGCONT)
		ep.frozenFor = time.Since(frozenAt)
		// Thawed, it finds its session ended (frozen holding the row) or its lease taken (frozen outside a
		// transaction, its session intact).
		w.await(ep.frozen.name+" to notice it lost the process", time.Minute, func() bool {
			return ep.frozen.count("database connection lost; reconnecting") > lost ||
				ep.frozen.count("cursor taken by another instance; standing by") > taken
		})
		if ep.frozen.count("database connection lost; reconnecting") > lost {
			w.await(ep.frozen.name+" to reconnect", time.Minute, func() bool {
				return ep.frozen.count("reconnected") > reconnected
			})
		}
		w.sleep(100*time.Millisecond, 200*time.Millisecond)
		ep.to = w.auditMax()
		crashes[st.process]++
		episodes = append(episodes, ep)
	}
	w.calm()
	w.finish(sts, crashes)
	audit := w.audit()
	for _, ep := range episodes {
		frozenApp := "inorder:" + ep.st.process + "@" + ep.frozen.name
		standbyApp := "inorder:" + ep.st.process + "@" + ep.standby.name
		takeover := int64(-1)
		var late []string
		for _, a := range audit {
			if a.n <= ep.from || a.n > ep.to || a.process != ep.st.process {
				continue
			}
			if a.app == standbyApp && takeover < 0 {
				takeover = a.n
			}
			if a.app == frozenApp && takeover >= 0 {
				late = append(late, fmt.Sprintf("write %d (position %d)", a.n, a.id))
			}
		}
		where := "anywhere"
		if ep.midHandler {
			where = fmt.Sprintf("mid-handler (record %d)", ep.record)
		}
		t.Logf("%s: froze %s %s for %s; %s took over after %s", ep.st.process, ep.frozen.name, where,
			ep.frozenFor.Round(time.Millisecond), ep.standby.name, ep.taken.Round(time.Millisecond))
		// The stated bound is the longer of the lease and the idle timeout, plus a poll interval; the
		// standby's first write comes a batch after it took over, on a machine that may be busy.
		if bound := max(lease, idle) + 20*time.Millisecond + 2*time.Second; ep.taken > bound {
			t.Errorf("%s: %s took over %s after the freeze, more than %s", ep.st.process, ep.standby.name,
				ep.taken.Round(time.Millisecond), bound)
		}
		require.GreaterOrEqual(t, takeover, int64(0), "no write by the standby %s", ep.standby.name)
		if len(late) > 0 {
			t.Errorf("%s: the thawed instance %s wrote the cursor row after the standby %s took over: %s",
				ep.st.process, ep.frozen.name, ep.standby.name, strings.Join(late, ", "))
		}
	}
	var kids []*child
	for _, st := range sts {
		kids = append(kids, w.live(st)...)
	}
	w.stopCleanly(kids...)
}

// TestChecksSeeADroppedDelivery proves that the checks can fail: the receiver takes one request without
// recording it, and the stream is reported with lost=1; a reordered log, a position written back and a
// delivery by an instance that did not own the process are reported too, and so are an operator's write
// that moves the position and a record first delivered after later ones, unless its key was parked.
func TestChecksSeeADroppedDelivery(t *testing.T) {
	t.Parallel()
	w := sharedWorld(t, "proof")
	st := stream{process: "proof_record", checkpoint: "record", batch: 20}
	w.sink.drop(st.process, 25)
	w.write(2)
	w.start(st)
	w.await("40 deliveries", time.Minute, func() bool { return w.sink.count(st.process) >= 40 })
	w.writers.stop()
	order := w.drain([]stream{st}).of(st)
	log, audit := w.sink.deliveries(), w.audit()
	r := analyze(st.process, order, log, w.mon.observations(), audit)
	t.Log(r.line(w.name))
	require.Equal(t, 1, r.lost, r.problems)
	require.Zero(t, r.reorders)
	require.Contains(t, strings.Join(r.problems, "\n"), "was never delivered")
	require.Contains(t, strings.Join(r.problems, "\n"), "before every record up to it had been delivered")

	// Swap two first deliveries of one aggregate.
	swapped := append([]delivery(nil), log...)
	at := map[string]int{}
	for i, d := range swapped {
		if j, ok := at[d.Agg]; ok {
			swapped[i], swapped[j] = swapped[j], swapped[i]
			break
		}
		at[d.Agg] = i
	}
	r = analyze(st.process, order, swapped, nil, nil)
	require.Equal(t, 1, r.reorders, r.problems)

	// A write that sets the position back.
	back := append(append([]auditRow(nil), audit...), auditRow{n: 1 << 40, process: st.process, app: "stale", id: order[0].id})
	r = analyze(st.process, order, log, nil, back)
	require.Contains(t, strings.Join(r.problems, "\n"), "by stale set the position back")

	// A write by an instance that no longer owns the process, and an epoch that goes back.
	require.NotEmpty(t, audit)
	lastWrite := audit[len(audit)-1]
	require.Positive(t, lastWrite.epoch, "the stream ran under an owner")
	stale := lastWrite
	stale.n, stale.app = lastWrite.n+1, "inorder:"+st.process+"@someone-else"
	older := lastWrite
	older.n, older.epoch = lastWrite.n+2, lastWrite.epoch-1
	r = analyze(st.process, order, log, nil, append(append([]auditRow(nil), audit...), stale, older))
	problems := strings.Join(r.problems, "\n")
	require.Contains(t, problems, "@someone-else was made while "+lastWrite.owner+" owned the process")
	require.Contains(t, problems, "set the owner's epoch back")

	// An operator's write that moves no position passes; one that moves it does not.
	asked := lastWrite
	asked.n, asked.app, asked.moved = lastWrite.n+1, operatorApp, false
	moved := asked
	moved.n, moved.moved = lastWrite.n+2, true
	r = analyze(st.process, order, log, nil, append(append([]auditRow(nil), audit...), asked))
	require.NotContains(t, strings.Join(r.problems, "\n"), operatorApp, r.problems)
	r = analyze(st.process, order, log, nil, append(append([]auditRow(nil), audit...), asked, moved))
	require.Contains(t, strings.Join(r.problems, "\n"), fmt.Sprintf("write %d by %s was made while", moved.n, operatorApp))

	// A parked record first delivered after later ones: in order for its key's parking, out of it else.
	var late []delivery
	var parkedID int64
	for i, d := range log {
		if i > 0 && d.Process == st.process {
			parkedID = d.ID
			late = append(append(append([]delivery(nil), log[:i]...), log[i+1:]...), d)
			break
		}
	}
	require.NotZero(t, parkedID)
	r = analyzeWith(st.process, false, map[int64]bool{parkedID: true}, order, late, nil, nil)
	require.Zero(t, r.orderBreaks, r.problems)
	r = analyze(st.process, order, late, nil, nil)
	require.Equal(t, 1, r.orderBreaks, r.problems)

	// A delivery by an instance other than the owner the cursor row named, amid the owner's.
	spans := w.mon.owners(st.process)
	bad, checked, _ := strangers(st.process, st.batch, log, spans)
	require.Empty(t, bad)
	require.Positive(t, checked, "the monitor saw the owner")
	other := append([]delivery(nil), log...)
	for _, sp := range spans {
		if sp.owner != "" && sp.from+1 < min(sp.until, len(other)) {
			other[sp.from].Instance = "someone-else"
			break
		}
	}
	bad, _, _ = strangers(st.process, st.batch, other, spans)
	require.Len(t, bad, 1)
	require.Contains(t, bad[0], "by someone-else while the cursor row named "+st.process+"-")
}
