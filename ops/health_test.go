package ops_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/ops"
	"github.com/inorder-dev/inorder/processor"
)

// get fetches url and returns its status and body, failing the test on error.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	code, body, err := fetch(url)
	require.NoError(t, err)
	return code, body
}

// status returns the status of url, 0 on error, for polled conditions.
func status(url string) int {
	code, _, _ := fetch(url)
	return code
}

// TestReadyzFollowsTheDatabase cuts one role off the database (the shared server stays up for the other
// tests) under a program wired as `inorder run --metrics-addr` wires it, and watches /readyz.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()

	// A role of the test's own, to cut off without touching anyone else's sessions.
	role := "ops_" + db.Name
	db.Exec(t, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN SUPERUSER PASSWORD 'ops'")
	t.Cleanup(func() { _, _ = db.Pool.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) })
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cc.User, cc.Password = role, "ops"
	cut := func() {
		db.Exec(t, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" NOLOGIN")
		db.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
	}
	restore := func() { db.Exec(t, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN") }

	// The processor's Client owns every connection: the metrics and the health check read through its pool.
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	pool := client.Pool()
	cfg.ClientConfig.ConnConfig, cfg.Client = cc, client
	cfg.ReconnectMax = 200 * time.Millisecond
	handled := make(chan int64, 100)
	cfg.Handler = handlers.HandlerFunc[row](func(_ context.Context, rec *handlers.Record[row]) error {
		handled <- rec.Value.ID
		return nil
	})
	m := ops.NewMetrics()
	cfg.Observer = m.Observer()
	p, err := processor.New(cfg)
	require.NoError(t, err)

	// The wiring of `inorder run --metrics-addr`.
	g := lifecycle.New(lifecycle.Config{})
	m.Track(p.Name())
	h := ops.NewHealth(ops.HealthConfig{Ping: pool.Ping, PingTimeout: time.Second, Metrics: m})
	addr, err := g.AddHTTPServer("ops", "127.0.0.1:0", ops.NewHandler(m, h), 5*time.Second)
	require.NoError(t, err)
	g.Add("lag", m.WatchLag(pool, 50*time.Millisecond))
	g.AddRunner(p)

	require.Equal(t, []string{"process jobs: starting (not connected yet)"}, h.Check(ctx),
		"a tracked processor that has not connected yet is not ready")

	runCtx, stop := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() { result <- g.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-result)
	})
	base := "http://" + addr.String()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	require.Eventually(t, func() bool {
		return status(base+"/readyz") == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "ready once the processor is connected")
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)
	for i := int64(1); i <= 5; i++ {
		require.Equal(t, i, <-handled)
	}
	// Cut only once the position is durable, so that nothing is due again after the reconnection.
	require.Eventually(t, func() bool {
		return is(scraped(base+"/metrics"), "inorder_lag_rows", 0)
	}, 20*time.Second, 10*time.Millisecond, "the lag is measured through the ops pool")

	cut()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body, err := fetch(base + "/readyz")
		require.NoError(c, err)
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Regexp(c, `(?m)^database: .+$`, body)
		// Reconnecting; and, once the pool has tried a new connection (the probe, sharing the
		// processor's pool, may be the first to), why it cannot.
		assert.Regexp(c, `(?m)^process jobs: reconnecting(: the database refused the credentials of user ops_\S+ on \S+ \(role "ops_\S+" is not permitted to log in\))?$`, body)
	}, 20*time.Second, 10*time.Millisecond, "unready while cut off")
	require.Equal(t, 0.0, value(t, scrape(t, base+"/metrics"), "inorder_connected"))
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "alive all the same")

	restore()
	require.Eventually(t, func() bool {
		return status(base+"/readyz") == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "ready again once the role may log in")
	require.Equal(t, 1.0, value(t, scrape(t, base+"/metrics"), "inorder_connected"))
	db.Exec(t, "INSERT INTO jobs DEFAULT VALUES")
	require.Equal(t, int64(6), <-handled, "the processor works again")
}

func TestReadyzWithoutProcessorsChecksTheDatabaseOnly(t *testing.T) {
	t.Parallel()
	var pingErr atomic.Pointer[error]
	var unbounded atomic.Bool
	h := ops.NewHealth(ops.HealthConfig{Ping: func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			unbounded.Store(true)
		}
		if err := pingErr.Load(); err != nil {
			return *err
		}
		return nil
	}})
	srv := httptest.NewServer(ops.NewHandler(nil, h))
	t.Cleanup(srv.Close)
	code, body := get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)

	require.False(t, unbounded.Load(), "the ping is bounded")
	err := errors.New("dial tcp: connection\nrefused")
	pingErr.Store(&err)
	code, body = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready\ndatabase: dial tcp: connection refused\n", body)

	code, _ = get(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusNotFound, code, "no Metrics, no /metrics")
	code, _ = get(t, srv.URL+"/other")
	require.Equal(t, http.StatusNotFound, code)
}
