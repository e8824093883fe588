package fault

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/setting"
	"github.com/inorder-dev/inorder/migrations"
)

// upgradeLease is the lease of every instance in the upgrade scenario: short, so that an instance of this
// version renews it, and by design folds its position into the cursor row, every second.
const upgradeLease = 3 * time.Second

// foldWindow bounds how long before it was killed an instance of this version delivered a record that an
// instance of the version before (which reads only the cursor row) delivers again on taking over: the age
// of the row's position at the kill. The design folds the position into the row at each renewal of the
// lease (a third of it), wherever the renewal is made, and when the owner stops. foldWindow is that third,
// and a second for a busy machine.
const foldWindow = upgradeLease/3 + time.Second

// upgrade upgrades a running process online, from the version before the newest migration (built from the
// repository's history) to this one, while writers write. This version refuses the older schema in one
// line; instances of the version before deliver while this version's `inorder migrate` applies the new
// schema, a pg_dump's locks making it wait (it must give up waiting at its lock timeout, so that they
// never stall much longer than that, and finish once the dump ends), and go on delivering rows written
// after it; then each is replaced in turn, each new instance
// standing by first: the older by this one with SIGTERM (a clean handover, which must deliver nothing
// again), back to the older with SIGTERM (this version folds its position into the cursor row when it
// stops), to this one again, and back to the older with SIGKILL, which may deliver again only what this
// version delivered after its last fold into the cursor row (see foldWindow). Nothing may be lost, first
// deliveries must be in order, and every write of a cursor row must be its owner's.
func upgrade(t *testing.T) {
	ctx := context.Background()
	old, rev, have := previousBinary(t)
	all := migrations.All()
	need := all[len(all)-1].Version
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	w := newWorldMigratedBy(t, "upgrade", db.URL, db.URL, old)
	var at int
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT max(version) FROM inorder.schema_migration").Scan(&at))
	require.Equal(t, have, at, "the schema the version before migrates to")
	t.Logf("the version before migration %d: %s, its schema at version %d", need, rev[:12], have)

	// The version before knows no insert clock: events has none here, and both versions read it by
	// created_at, on the writers horizon that the version before took by default for its clock_timestamp().
	sts := []stream{
		{process: "upgrade_record", checkpoint: "record", batch: 20, horizon: "writers"},
		{process: "upgrade_batch", checkpoint: "batch", batch: 20, horizon: "writers"},
	}
	if full {
		sts = append(sts, stream{process: "upgrade_txn", checkpoint: "record", batch: 20, horizon: "transactions"})
	}
	flags := []string{"--lease", upgradeLease.String(), "--handler-timeout", "1500ms", "--webhook-timeout", "1s",
		"--idle-timeout", "10s"}

	// This version refuses the older schema in one line, and registers nothing.
	refused := w.startBin(binary, sts[0], w.via, flags...)
	require.NotZero(t, refused.wait(t, 30*time.Second), "this version ran on the older schema")
	lines := strings.Split(strings.TrimSpace(refused.logs()), "\n")
	require.Len(t, lines, 1, "this version on the older schema: %s", refused.logs())
	require.Contains(t, lines[0], fmt.Sprintf("the schema is at version %d, this inorder needs %d", have, need))
	var rows int
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT count(*) FROM inorder.cursor").Scan(&rows))
	require.Zero(t, rows, "this version registered a process on the older schema")

	w.write(writerCount)
	owner := map[string]*child{}
	for _, st := range sts {
		owner[st.process] = w.startBin(old, st, w.via, flags...)
	}
	w.warmup(sts)

	// This version's migrate while the version before delivers, and while a pg_dump holds ACCESS SHARE on
	// every table: a migration that alters a table of inorder's gives up waiting for its lock at least
	// once, so that the instances never stall for long behind it, and is done once the dump is; one that
	// needs no such lock (14 adds a table and a function) is done while the dump runs. Either way, rows
	// written after it must arrive through the same instances.
	mark := w.sink.len()
	logged := map[string]int{}
	for _, st := range sts {
		logged[st.process] = len(owner[st.process].logs())
	}
	dumped := w.holdLikePgDump()
	began := time.Now()
	m := w.background("migrate", binary, "migrate")
	w.await("inorder migrate to give up waiting for its lock, or to be done, while the dump runs", 30*time.Second, func() bool {
		return strings.Contains(m.logs(), "trying again in") || strings.Contains(m.logs(), "schema is at version")
	})
	dumped()
	dump := time.Since(began)
	require.Zero(t, m.wait(t, time.Minute), "inorder migrate beside the version before: %s", m.logs())
	took := time.Since(began)
	_, err := w.pool.Exec(ctx, auditCheckpoints)
	require.NoError(t, err)
	var migratedAt time.Time
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT inorder.schema_version(), clock_timestamp()").Scan(&at, &migratedAt))
	require.Equal(t, need, at)
	for _, st := range sts {
		c := owner[st.process]
		var after int64
		w.await("a row written after inorder migrate", 30*time.Second, func() bool {
			return w.pool.QueryRow(ctx, "SELECT id FROM events WHERE created_at > $1 ORDER BY created_at, id LIMIT 1",
				migratedAt).Scan(&after) == nil
		})
		w.await(c.name+" (the version before) to deliver record "+fmt.Sprint(after)+", written after inorder migrate",
			time.Minute, func() bool { return w.delivered(st, c, after) })
		require.True(t, c.running(), "%s (the version before) exited after inorder migrate", c.name)
		pause := w.longestPause(st, c, mark, began, after)
		warned, said := summary(c.logs()[logged[st.process]:])
		t.Logf("%s: inorder migrate took %s beside %s (the version before), a pg_dump holding its lock for the "+
			"first %s; the instance's longest pause in deliveries from migrate's start until record %d (written "+
			"after it) was %s; its log meanwhile: %s", st.process, took.Round(time.Millisecond), c.name,
			dump.Round(time.Millisecond), after, pause.Round(time.Millisecond), said)
		require.Less(t, pause, setting.DefaultLockTimeout+2*time.Second,
			"%s (the version before) stalled behind inorder migrate", c.name)
		require.Zero(t, warned, "%s (the version before) noticed inorder migrate: %s", c.name, said)
	}
	t.Logf("inorder migrate said:\n%s", strings.TrimSpace(m.logs()))

	// The handovers, each new instance standing by first; the writers go on throughout.
	type leg struct {
		bin, what string
		sig       syscall.Signal
	}
	legs := []leg{
		{binary, "this version", syscall.SIGTERM},
		{old, "the version before", syscall.SIGTERM},
		{binary, "this version", syscall.SIGTERM},
		{old, "the version before", syscall.SIGKILL},
	}
	// By stream: the instance of this version killed, when, and the instance of the version before that
	// took over from it.
	killed, killedAt, rescuer := map[string]*child{}, map[string]time.Time{}, map[string]*child{}
	for _, l := range legs {
		for _, st := range sts {
			from := owner[st.process]
			next := w.startBin(l.bin, st, w.via, flags...)
			w.await(next.name+" to stand by", 30*time.Second, func() bool {
				return next.count("another instance works the process; standing by") > 0
			})
			require.Zero(t, w.deliveredBy(st, next), "%s delivered while %s owned the process", next.name, from.name)
			if l.sig == syscall.SIGKILL {
				// At a random point at least a third of the lease into its tenure, so that it has renewed
				// its lease (and by design folded its position into the row) since it took over.
				w.sleep(upgradeLease/3, upgradeLease)
				killedAt[st.process] = time.Now()
				killed[st.process], rescuer[st.process] = from, next
				from.signal(t, syscall.SIGKILL)
				from.wait(t, 10*time.Second)
			} else {
				w.stopCleanly(from)
			}
			stopped := time.Now()
			w.await(next.name+" to take over and deliver", time.Minute, func() bool { return w.deliveredBy(st, next) > 0 })
			t.Logf("%s: %s stopped with %s; %s (%s) delivered %s later", st.process, from.name, l.sig, next.name,
				l.what, time.Since(stopped).Round(time.Millisecond))
			owner[st.process] = next
		}
	}

	// Every delivery again is the kill's, of a record the killed instance delivered after its last fold.
	w.mayGoBack = func(a auditRow) bool {
		r := rescuer[a.process]
		return r != nil && a.app == "inorder:"+a.process+"@"+r.name && a.moved
	}
	w.allowance = func(st stream, log []delivery) int {
		allowed, early, oldest := w.afterFold(st, log, killed[st.process], rescuer[st.process], killedAt[st.process])
		design := "within"
		if oldest > upgradeLease/3 {
			design = "beyond"
		}
		t.Logf("%s: after the kill, %s (the version before) delivered again %d records that %s (this version) had "+
			"delivered, the earliest %s before the kill: %s a third of the lease (%s), at which the design folds",
			st.process, rescuer[st.process].name, allowed+len(early), killed[st.process].name,
			oldest.Round(time.Millisecond), design, upgradeLease/3)
		for _, e := range early {
			t.Errorf("%s: %s", st.process, e)
		}
		return allowed
	}
	w.calm()
	reports := w.finish(sts, map[string]int{})
	for _, st := range sts {
		for _, b := range reports[st.process].writesBack {
			t.Logf("%s: after the kill, %s", st.process, b)
		}
	}
	for _, st := range sts {
		w.stopCleanly(owner[st.process])
	}
}

// delivered reports whether c delivered record id of st.
func (w *world) delivered(st stream, c *child, id int64) bool {
	for _, d := range w.sink.deliveries() {
		if d.Process == st.process && d.Instance == c.name && d.ID == id {
			return true
		}
	}
	return false
}

// deliveredBy counts the deliveries of st that c made.
func (w *world) deliveredBy(st stream, c *child) int {
	n := 0
	for _, d := range w.sink.deliveries() {
		if d.Process == st.process && d.Instance == c.name {
			n++
		}
	}
	return n
}

// longestPause returns the longest time between deliveries of st by c, from began (and receiver index
// mark) to its delivery of record until.
func (w *world) longestPause(st stream, c *child, mark int, began time.Time, until int64) time.Duration {
	var longest time.Duration
	last := began
	for _, d := range w.sink.since(mark) {
		if d.Process != st.process || d.Instance != c.name {
			continue
		}
		longest = max(longest, d.At.Sub(last))
		last = d.At
		if d.ID == until {
			break
		}
	}
	return longest
}

// afterFold sorts the deliveries of st that rescuer made again of records killed had delivered: allowed
// counts those that killed delivered within foldWindow of killedAt, early says which ones it delivered
// before, and oldest is how long before the kill the earliest of them was delivered.
func (w *world) afterFold(st stream, log []delivery, killed, rescuer *child, killedAt time.Time) (allowed int,
	early []string, oldest time.Duration) {
	byKilled := map[int64]time.Time{}
	for _, d := range log {
		if d.Process == st.process && d.Instance == killed.name {
			byKilled[d.ID] = d.At
		}
	}
	for _, d := range log {
		at, ok := byKilled[d.ID]
		if d.Process != st.process || d.Instance != rescuer.name || !ok {
			continue
		}
		before := killedAt.Sub(at)
		oldest = max(oldest, before)
		if before > foldWindow {
			early = append(early, fmt.Sprintf("record %d, which %s delivered %s before it was killed (more than %s), "+
				"was delivered again by %s", d.ID, killed.name, before.Round(time.Millisecond), foldWindow, rescuer.name))
			continue
		}
		allowed++
	}
	return allowed, early, oldest
}

// summary counts the warnings and errors in a child's JSON log lines, and says so, quoting the first.
func summary(logs string) (int, string) {
	var n int
	var first string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			if n++; n == 1 {
				first = line
			}
		}
	}
	if n == 0 {
		return 0, "no warnings or errors"
	}
	return n, fmt.Sprintf("%d warnings or errors, the first: %s", n, first)
}

// holdLikePgDump takes ACCESS SHARE on every table of the schemas inorder and public in a transaction of
// its own, named pg_dump, as a pg_dump does for its whole length; the function returned ends it.
func (w *world) holdLikePgDump() func() {
	w.t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(w.url)
	require.NoError(w.t, err)
	cfg.RuntimeParams["application_name"] = "pg_dump"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ;
		DO $$
		DECLARE
			t regclass;
		BEGIN
			FOR t IN SELECT c.oid FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
			         WHERE n.nspname IN ('inorder', 'public') AND c.relkind = 'r' ORDER BY c.oid
			LOOP
				EXECUTE format('LOCK TABLE %s IN ACCESS SHARE MODE', t);
			END LOOP;
		END
		$$`)
	require.NoError(w.t, err)
	return func() {
		_, err := conn.Exec(ctx, "COMMIT")
		require.NoError(w.t, err)
	}
}

// background starts an inorder command of bin that runs to its end, named name; the test's cleanup kills it.
func (w *world) background(name, bin string, args ...string) *child {
	w.t.Helper()
	c := &child{name: name, done: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = w.env()
	c.cmd.Stderr = c
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(w.t, c.cmd.Start())
	go func() {
		_ = c.cmd.Wait()
		close(c.done)
	}()
	w.t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	w.mu.Lock()
	w.children = append(w.children, c)
	w.mu.Unlock()
	return c
}
