package fault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
)

// failover runs a primary and an asynchronous streaming standby of its own (pg_basebackup); the children,
// the writers and the checks connect with a multi-host URL (primary, then standby) and
// target_session_attrs=read-write. Streaming to the standby is cut first, so that what the primary commits
// next exists only there, and the processors deliver some of it. Then the primary is stopped at once
// (immediate shutdown, as a crash) and the standby promoted. Without anyone restarting them, the children
// must reconnect to the new primary and deliver every row it has, first deliveries in order; and every
// record they delivered that the failover took back must be named in a child's log.
func failover(t *testing.T) {
	ctx := context.Background()
	primary, primaryLog := ownCluster(t, "the primary's", nil)
	standby, err := primary.StartStandby(ctx)
	if errors.Is(err, pgcluster.ErrNoBaseBackup) {
		t.Skipf("failover needs a standby: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/fault?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())
	w := newWorld(t, "failover", multi)
	w.dumps = append(w.dumps, primaryLog)
	sts := streamsFor("failover", "record")
	w.write(writerCount)
	for _, st := range sts {
		w.start(st)
		w.start(st)
	}
	w.warmup(sts)

	// Cut the streaming once the standby has everything so far; from then on the primary's commits are
	// its own.
	stby, err := pgx.Connect(ctx, standby.URL("fault"))
	require.NoError(t, err)
	defer stby.Close(ctx)
	var lsn string
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	w.await("the standby to replay what the primary has", time.Minute, func() bool {
		var caught bool
		return stby.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&caught) == nil && caught
	})
	_, err = stby.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''")
	require.NoError(t, err)
	_, err = stby.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	w.await("the standby's WAL receiver to stop", time.Minute, func() bool {
		var n int
		return stby.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n) == nil && n == 0
	})
	// Every row inserted from now on (a greater id) commits after the cut: only the primary has it.
	var cutID int64
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM events").Scan(&cutID))
	cut := w.sink.len()
	// Every stream delivers some: the failover must take back rows each had delivered.
	w.await("deliveries of rows only the primary has, by every stream", time.Minute, func() bool {
		n := map[string]int{}
		for _, d := range w.sink.deliveries() {
			if d.ID > cutID {
				n[d.Process]++
			}
		}
		for _, st := range sts {
			if n[st.process] < 5 {
				return false
			}
		}
		return true
	})

	require.NoError(t, primary.Kill())
	killedAt, killTime := w.sink.len(), time.Now()
	require.NoError(t, stby.Close(ctx))
	require.NoError(t, standby.Promote(ctx))
	t.Logf("primary stopped at once after %d deliveries (%d since the cut); standby promoted", killedAt, killedAt-cut)
	for _, st := range sts {
		n := w.sink.count(st.process)
		w.await(st.process+" to deliver from the new primary", time.Minute, func() bool { return w.sink.count(st.process) > n })
	}
	w.calm()
	w.writers.stop()
	orders := w.drain(sts)
	rows := map[int64]row{}
	for _, r := range orders.byClock {
		rows[r.id] = r
	}

	// The new primary gives ids anew from where its sequence stood, and the writers, their aggregates'
	// sequence numbers anew: a row written after the failover may even repeat a lost row's content. A
	// delivery made before the kill can only be of a row written before it.
	newer := map[int64]bool{}
	rs, err := w.pool.Query(ctx, "SELECT id FROM events WHERE created_at >= $1", killTime)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rs, pgx.RowTo[int64])
	require.NoError(t, err)
	for _, id := range ids {
		newer[id] = true
	}
	log := w.sink.deliveries()
	for _, st := range sts {
		// Deliveries of rows the new primary does not have.
		var kept []delivery
		vanished := map[int64]bool{}
		for i, d := range log {
			if d.Process != st.process {
				continue
			}
			if r, ok := rows[d.ID]; ok && r.agg == d.Agg && r.seq == d.Seq && !(i < killedAt && newer[d.ID]) {
				kept = append(kept, d)
				continue
			}
			vanished[d.ID] = true
		}
		require.NotEmpty(t, vanished, "%s: the failover took back rows that had been delivered", st.process)
		named := map[int64]bool{}
		for _, c := range w.live(st) {
			for _, id := range vanishedInLog(t, c.logs()) {
				named[id] = true
			}
		}
		for id := range vanished {
			if !named[id] {
				t.Errorf("%s: record %d was delivered and the failover took it back, but no instance named it", st.process, id)
			}
		}
		r := analyze(st.process, orders.of(st), kept, nil, nil)
		r.crashes = 1
		line := fmt.Sprintf("%s taken_back=%d", r.line(w.name), len(vanished))
		t.Log(line)
		if full {
			fmt.Fprintln(os.Stdout, line)
		}
		if len(r.problems) > 0 {
			t.Errorf("%s: %d problems:\n  %s", st.process, len(r.problems), strings.Join(r.problems[:min(20, len(r.problems))], "\n  "))
		}
	}
	var kids []*child
	for _, st := range sts {
		kids = append(kids, w.live(st)...)
	}
	require.Len(t, kids, 2*len(sts), "no child exited by itself")
	w.stopCleanly(kids...)
}

// vanishedInLog returns the record ids a child's log names as delivered and no longer on the server.
func vanishedInLog(t *testing.T, logs string) []int64 {
	var ids []int64
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "no longer exist on the server") {
			continue
		}
		var entry struct {
			Records []string `json:"records"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		for _, s := range entry.Records {
			var id int64
			_, err := fmt.Sscan(s, &id)
			require.NoError(t, err, line)
			ids = append(ids, id)
		}
	}
	return ids
}
