package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/processor"
)

// backends lists the application_name of every client backend of the test's database but the test's own
// (its pool's, named as the connection that asks is).
func backends(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT application_name FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend'
		  AND application_name IS DISTINCT FROM current_setting('application_name')
		ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// backendWatch looks at the backends of a database until stopped: the most seen at once, and every name
// seen.
type backendWatch struct {
	mu    sync.Mutex
	most  []string            // the backends at the look that saw the most
	names map[string]struct{} // every application_name seen
	stop  chan struct{}
	done  chan struct{}
}

func watchBackends(t *testing.T, db *pgtest.DB) *backendWatch {
	t.Helper()
	w := &backendWatch{names: map[string]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			rows, err := db.Pool.Query(context.Background(), `SELECT application_name FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend'
				  AND application_name IS DISTINCT FROM current_setting('application_name')`)
			if err == nil {
				if names, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
					w.mu.Lock()
					if len(names) > len(w.most) {
						w.most = names
					}
					for _, n := range names {
						w.names[n] = struct{}{}
					}
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *backendWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// seen ends the watch and returns the most backends seen at once, and every name seen.
func (w *backendWatch) seen() (most []string, names []string) {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	for n := range w.names {
		names = append(names, n)
	}
	return w.most, names
}

// requireTheInstances says that every backend seen was one of instance's connections: all of them are
// made by its Client (its pool, its session) and named after it, but for a pool connection's name during a
// step of the checkpoints' rotation (SET LOCAL).
func requireTheInstances(t *testing.T, instance string, names []string) {
	t.Helper()
	for _, n := range names {
		require.True(t, strings.HasSuffix(n, "@"+instance) || n == store.RotateApplicationName,
			"backend %q is not one of instance %s's Client: %v", n, instance, names)
	}
}

// TestALoneProcessorHoldsItsClientsConnectionsOnly counts the backends of a processor given no Client,
// listening: its own Client holds a session (the ownership lock), one connection that its batches, its
// probe and its look for the notify trigger take turns on, and the listener's, which the pool made and
// gave up. Three, throughout a backlog, a wake-up and a lost listener, and each named after the instance.
func TestALoneProcessorHoldsItsClientsConnectionsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createNotifyTrigger(t, b)
	var logs logBuffer
	b.cfg.Listen, b.cfg.ClientConfig.Instance = true, "lone"
	b.cfg.Logger = zerolog.New(&logs)
	rows := b.insert(t, 200)
	w := watchBackends(t, b.db)
	start(t, b.cfg)
	waitFor(t, "the backlog", func() bool { return b.h.count() == len(rows) })
	waitFor(t, "the listener", func() bool { return logs.count("listening for insert notifications") == 1 })
	b.insert(t, 3)
	waitFor(t, "the rows a notification announced", func() bool { return b.h.count() == len(rows)+3 })
	b.db.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name LIKE 'inorder-listen:%' AND datname = current_database()`)
	waitFor(t, "a new listener", func() bool { return logs.count("listening for insert notifications") == 2 })
	waitFor(t, "the session, the connection to work on, the listener", func() bool { return len(backends(t, b.db)) == 3 })
	most, names := w.seen()
	require.Len(t, most, 3, "never more than the Client's two and the listener: %v", most)
	requireTheInstances(t, "lone", names)
}

// TestAPartitionedProcessHoldsItsClientsConnectionsOnly counts the backends of a partitioned process given
// no Client, four partitions on two slots, listening: its own Client holds a session, a connection for each
// slot (which the probe borrows too), and two that the pool made and gave up: the coordinator's and the
// one listener of every partition. At most five, each named after the instance.
func TestAPartitionedProcessHoldsItsClientsConnectionsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.partitionIndex(t, 4)
	createNotifyTrigger(t, b)
	for i := range 40 {
		b.db.Exec(t, "INSERT INTO events (aggregate_id, seq) VALUES ($1, 1)", fmt.Sprintf("k%d", i))
	}
	cfg := b.cfg
	cfg.Process, cfg.ClientConfig.Instance, cfg.Listen = "partitioned", "parts", true
	w := watchBackends(t, b.db)
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 4, Slots: 2})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	waitFor(t, "every partition's rows", func() bool { return b.h.count() == 40 })
	b.db.Exec(t, "INSERT INTO events (aggregate_id, seq) SELECT 'k' || g, 2 FROM generate_series(0, 39) g")
	waitFor(t, "the rows after", func() bool { return b.h.count() == 80 })
	waitFor(t, "the coordinator and a listener", func() bool {
		names := strings.Join(backends(t, b.db), " ")
		return strings.Contains(names, "partitioned@parts") && strings.Contains(names, "inorder-listen:")
	})
	most, names := w.seen()
	require.LessOrEqual(t, len(most), 5, "the session, a connection per slot, the coordinator and the listener: %v", most)
	requireTheInstances(t, "parts", names)
}
