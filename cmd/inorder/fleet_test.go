package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestAFleetRunsThirtyProcessesOnFewConnectionsPerInstance runs three instances of one configuration file
// with 30 processes on 30 tables while rows are written throughout, and stops and restarts them one after
// another (a rolling restart): within two leases of each return each instance owns between 9 and 11 of the
// processes, and still does at the end; every row reaches stdout once, in order per process, from one
// instance at a time; and no instance ever has more connections than --max-conns (its default) open.
func TestAFleetRunsThirtyProcessesOnFewConnectionsPerInstance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tables, maxConns, lease = 30, 4, 10 * time.Second
	var ddl, entries strings.Builder
	for i := range tables {
		fmt.Fprintf(&ddl, `CREATE TABLE outbox_%02d (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
			CREATE INDEX ON outbox_%02d (created_at, id);`, i, i)
		fmt.Fprintf(&entries, "  - process: relay_%02d\n    table: outbox_%02d\n", i, i)
	}
	b.db.Exec(t, ddl.String())
	for i := range tables {
		pgtest.AddClock(t, b.db, fmt.Sprintf("outbox_%02d", i))
	}
	path := writeConfig(t, `
database-url: ${DATABASE_URL}
start-from: beginning
poll-interval: 50ms
lease: 10s
processes:
`+entries.String())

	// Sample each instance's sessions (named "inorder…@<instance>") until the test ends.
	most := map[string]int{}
	var mostMu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	samples := 0
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			rows, err := b.db.Pool.Query(ctx, `SELECT split_part(application_name, '@', 2), count(*)::int
				FROM pg_stat_activity WHERE application_name LIKE 'inorder%@%' AND datname = current_database()
				GROUP BY 1`)
			if err != nil {
				continue
			}
			mostMu.Lock()
			for rows.Next() {
				var in string
				var n int
				if rows.Scan(&in, &n) == nil && n > most[in] {
					most[in] = n
				}
			}
			samples++
			mostMu.Unlock()
			rows.Close()
		}
	}()
	defer func() { cancel(); <-sampled }()

	instances := map[string]*proc{}
	var stopped []*proc // instances stopped halfway, whose output counts too
	for _, in := range []string{"a", "b", "c"} {
		instances[in] = startBinary(t, b.env, "run", "--config", path, "--instance", in)
	}
	want := map[string][]int64{}
	write := func(round int) {
		// Each round writes to every table, one row to most and five to a few.
		var sql strings.Builder
		for i := range tables {
			n := 1
			if (i+round)%7 == 0 {
				n = 5
			}
			fmt.Fprintf(&sql, "INSERT INTO outbox_%02d SELECT FROM generate_series(1, %d);", i, n)
			process := fmt.Sprintf("relay_%02d", i)
			for range n {
				want[process] = append(want[process], int64(len(want[process])+1))
			}
		}
		b.db.Exec(t, sql.String())
	}
	// delivered returns, per process, the ids each run of an instance printed, in its order.
	delivered := func() map[string][][]int64 {
		got := map[string][][]int64{}
		outputs := append([]*proc(nil), stopped...)
		for _, p := range instances {
			outputs = append(outputs, p)
		}
		for i, p := range outputs {
			for _, l := range p.output() {
				var line struct {
					Process string
					Record  struct{ ID int64 }
				}
				require.NoError(t, json.Unmarshal([]byte(l), &line), l)
				runs := got[line.Process]
				for len(runs) <= i {
					runs = append(runs, nil)
				}
				runs[i] = append(runs[i], line.Record.ID)
				got[line.Process] = runs
			}
		}
		return got
	}
	count := func(runs [][]int64) (n int) {
		for _, r := range runs {
			n += len(r)
		}
		return n
	}
	caughtUp := func() bool {
		got := delivered()
		for process, ids := range want {
			if count(got[process]) < len(ids) {
				return false
			}
		}
		return true
	}
	for round := range 12 {
		write(round)
		if in, ok := map[int]string{3: "a", 6: "b", 9: "c"}[round]; ok {
			// A rolling restart, one instance after another: each gives its processes up at a clean stop,
			// the others take them, and it comes back to take its share again.
			require.Eventually(t, caughtUp, 60*time.Second, 20*time.Millisecond, "caught up before restarting %s", in)
			old := instances[in]
			require.NoError(t, old.cmd.Process.Signal(syscall.SIGTERM))
			require.Zero(t, old.wait(t), old.logs())
			stopped = append(stopped, old)
			instances[in] = startBinary(t, b.env, "run", "--config", path, "--instance", in)
			var last map[string]int
			if !assert.Eventually(t, func() bool { last = owners(t, b); return shared(last, tables) }, 2*lease, 20*time.Millisecond) {
				// Said on standard error too, at once: the test's log is long, and a CI log cut short keeps
				// its first and last lines.
				fmt.Fprintf(os.Stderr, "%s: not each instance owning between 9 and 11 processes within two leases of restarting %s: at the last look %v\n",
					t.Name(), in, last)
				t.Fatalf("each instance owning between 9 and 11 processes within two leases of restarting %s: at the last look %v", in, last)
			}
		}
	}
	require.Eventually(t, caughtUp, 60*time.Second, 20*time.Millisecond, "every row delivered")
	// Still shared at the end (a process between two owners for a moment counts as neither: look again).
	var o map[string]int
	if !assert.Eventually(t, func() bool { o = owners(t, b); return shared(o, tables) }, lease, 20*time.Millisecond) {
		fmt.Fprintf(os.Stderr, "%s: the processes not shared at the end: at the last look %v\n", t.Name(), o)
		t.Fatalf("the processes stay shared: at the last look %v", o)
	}
	got := delivered()
	for process, ids := range want {
		// One instance at a time: each run of an instance printed the process's ids rising, in unbroken
		// stretches (a run may own the process, give it up to a returning instance and take it back, so the
		// ids between its stretches are another run's), and the stretches of all runs, put in order, are
		// every id once.
		var stretches [][]int64
		for i, r := range got[process] {
			for k, id := range r {
				if k > 0 {
					require.Greater(t, id, r[k-1], "process %s: run %d printed %d after %d", process, i, id, r[k-1])
				}
				if k == 0 || id != r[k-1]+1 {
					stretches = append(stretches, nil)
				}
				stretches[len(stretches)-1] = append(stretches[len(stretches)-1], id)
			}
		}
		slices.SortFunc(stretches, func(x, y []int64) int { return int(x[0] - y[0]) })
		require.Equal(t, ids, slices.Concat(stretches...), "process %s: every row once, in order, one instance at a time", process)
	}

	for _, p := range instances {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Zero(t, p.wait(t), p.logs())
	}
	cancel()
	<-sampled
	require.Positive(t, samples)
	for _, in := range []string{"a", "b", "c"} {
		require.Positive(t, most[in], "instance %s was seen", in)
		require.LessOrEqual(t, most[in], maxConns, "instance %s's connections at their most", in)
	}
	t.Logf("connections at their most: %v over %d samples", most, samples)
}

// owners counts, by instance, the processes whose lease runs.
func owners(t *testing.T, b *bundle) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT owner_instance, count(*)::int FROM inorder.cursor
		WHERE lease_expires_at > clock_timestamp() GROUP BY 1`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var in string
		var n int
		require.NoError(t, rows.Scan(&in, &n))
		out[in] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// shared reports whether all of the processes are owned, by the three instances, each owning between
// ceil(P/I)-1 and ceil(P/I)+1 of them.
func shared(o map[string]int, processes int) bool {
	total := 0
	for _, in := range []string{"a", "b", "c"} {
		if o[in] < processes/3-1 || o[in] > (processes+2)/3+1 {
			return false
		}
		total += o[in]
	}
	return total == processes
}
