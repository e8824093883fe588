package fault

import (
	"context"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
)

// pooledLease is the --lease of the children behind a pooler: through one, a standby cannot see that the
// owner's session ended, so a killed owner is replaced once its lease has run out.
const pooledLease = 2 * time.Second

// pooled runs the children and the writers through a real PgBouncer with its default configuration, in
// mode: `inorder migrate` from four instances at once on an empty database, then two instances of each
// stream, the owner killed with SIGKILL again and again and started anew. Each kill must be followed by
// the standby's takeover within the lease plus a poll interval (with a margin for a busy machine), and the
// checks of every scenario apply: nothing lost or reordered, at most one redelivery per kill, one owner at
// a time. No instance may log an operator's move, since no operator acts.
func pooled(t *testing.T, mode pgbouncer.Mode) {
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	poolSize := 8
	if mode == pgbouncer.Session {
		poolSize = 24 // a server connection per client
	}
	bouncer, err := pgbouncer.Start(context.Background(), pgbouncerConfig(t, db.URL, mode, poolSize))
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer:\n%s", tail(bouncer.Output(), 40))
		}
		_ = bouncer.Stop()
	})
	via := bouncer.URL(db.Name, "default_query_exec_mode=exec")
	migrateAtOnce(t, db.URL, via, 4)

	w := newWorldVia(t, "pooled_"+string(mode), db.URL, via)
	sts := streamsFor("pooled_"+string(mode), "record")
	extra := []string{"--idle-timeout", "10s", "--webhook-timeout", "500ms", "--lease", pooledLease.String()}
	w.write(writerCount)
	for _, st := range sts {
		w.start(st, extra...)
		w.start(st, extra...)
	}
	w.warmup(sts)
	crashes := map[string]int{}
	for i := range pick(3, 8) * len(sts) {
		st := sts[i%len(sts)]
		w.sleep(100*time.Millisecond, 400*time.Millisecond)
		var victim *child
		w.await("an owner of "+st.process, time.Minute, func() bool { victim = w.owner(st); return victim != nil })
		victim.signal(t, syscall.SIGKILL)
		killed := time.Now()
		victim.wait(t, 10*time.Second)
		crashes[st.process]++
		var next *child
		w.await("a standby to take "+st.process+" over", time.Minute, func() bool {
			next = w.owner(st)
			return next != nil && next != victim
		})
		took := time.Since(killed)
		t.Logf("%s: killed %s; %s took over after %s", st.process, victim.name, next.name, took.Round(time.Millisecond))
		if bound := pooledLease + 20*time.Millisecond + 2*time.Second; took > bound {
			t.Errorf("%s: %s took over %s after the kill, more than %s", st.process, next.name, took.Round(time.Millisecond), bound)
		}
		w.start(st, extra...)
	}
	w.calm()
	w.finish(sts, crashes)
	w.mu.Lock()
	kids := append([]*child(nil), w.children...)
	w.mu.Unlock()
	for _, c := range kids {
		require.Zero(t, c.count("position moved by an operator (skip or rewind)"), "%s saw an operator where none acted", c.name)
	}
	var mode2 string
	for _, c := range kids {
		if c.count("the database connection goes through a pooler: ownership rests on the lease in the cursor row, "+
			"and a standby replaces a frozen or vanished owner once its lease has run out") > 0 {
			mode2 = string(mode)
		}
	}
	require.Equal(t, string(mode), mode2, "the children tell that they are behind a pooler")
}

// pgbouncerConfig is a PgBouncer in mode in front of the server of url.
func pgbouncerConfig(t *testing.T, url string, mode pgbouncer.Mode, poolSize int) pgbouncer.Config {
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return pgbouncer.Config{Mode: mode, Host: cc.Host, Port: int(cc.Port), User: cc.User, Password: cc.Password,
		PoolSize: poolSize}
}

// migrateAtOnce runs `inorder migrate` from n instances at once through via, on the empty database of url,
// and checks that every migration was applied exactly once.
func migrateAtOnce(t *testing.T, url, via string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	outs := make([][]byte, n)
	errs := make([]error, n)
	env := (&world{via: via}).env()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(binary, "migrate")
			cmd.Env = env
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "inorder migrate #%d through the pooler: %s", i, outs[i])
	}
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT version FROM inorder.schema_migration ORDER BY version")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	var want []int32
	for _, m := range migrations.All() {
		want = append(want, int32(m.Version))
	}
	require.Equal(t, want, versions, "every migration applied once by %d instances at once", n)
	t.Logf("inorder migrate from %d instances at once through the pooler: %d versions applied once", n, len(versions))
}
