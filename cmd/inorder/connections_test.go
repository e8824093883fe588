package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/store"
)

// TestRunHoldsItsClientsConnectionsOnly counts the backends of `inorder run --listen --metrics-addr`: the
// instance's Client holds a session (the ownership lock), a pool of --max-conns - 1 that the batches, the
// probe and the metrics borrow from, and the listener's connection, which the pool made and gave up. With
// --max-conns 3, at most four, throughout a backlog, scrapes of the metrics and a wake-up, and each named
// after the instance: nothing else dials the database.
func TestRunHoldsItsClientsConnectionsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, stderr := runBinary(t, b.env, "migrate", "--notify", "bookings")
	require.Zero(t, code, stderr)
	b.book(t, 300, "1")

	ctx := context.Background()
	var mu sync.Mutex
	var most []string
	seen := map[string]bool{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			rows, err := b.db.Pool.Query(ctx, `SELECT application_name FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend'
				  AND application_name IS DISTINCT FROM current_setting('application_name')`)
			if err == nil {
				if names, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
					mu.Lock()
					if len(names) > len(most) {
						most = names
					}
					for _, n := range names {
						seen[n] = true
					}
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	})

	p := startBinary(t, b.env, runArgs("--listen", "--poll-interval", "1h", "--instance", "cli", "--max-conns", "3",
		"--metrics-addr", "127.0.0.1:0")...)
	addr := metricsAddr(t, p)
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	require.Eventually(t, func() bool { return len(p.output()) == 300 }, 30*time.Second, 5*time.Millisecond, p.logs())
	require.Eventually(t, func() bool { return strings.Contains(p.logs(), "listening for insert notifications") },
		20*time.Second, 5*time.Millisecond, p.logs())
	b.book(t, 3, "2") // only a notification delivers them before the hour's poll
	require.Eventually(t, func() bool { return len(p.output()) == 303 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Eventually(t, func() bool { return strings.Contains(scrape(), `inorder_lag_rows{process="booking_sms"} 0`) },
		20*time.Second, 10*time.Millisecond, "the lag is measured, on the Client's pool")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, len(most), 4, "the session, a pool of two and the listener: %v", most)
	require.True(t, seen["inorder-session:@cli"] && seen["inorder-listen:@cli"], "the session and the listener: %v", seen)
	for n := range seen { // a pool connection is named for a step of the checkpoints' rotation (SET LOCAL)
		require.True(t, strings.HasSuffix(n, "@cli") || n == store.RotateApplicationName,
			"backend %q is not one of the instance's Client: %v", n, seen)
	}
}
