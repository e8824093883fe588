package ops_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/ops"
	"github.com/inorder-dev/inorder/processor"
)

// TestAPartitionedProcessIsTrackedAsAWhole: a partitioned run's readiness and lag follow the process as
// a whole: ready once it works, and the lag series of the process counts the rows behind every partition.
func TestAPartitionedProcessIsTrackedAsAWhole(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t) // five rows
	db.Exec(t, `ALTER TABLE jobs ADD COLUMN k text NOT NULL DEFAULT 'a';
		UPDATE jobs SET k = 'k' || id;
		INSERT INTO jobs (k) SELECT 'k' || g FROM generate_series(1, 5) g`)
	db.Exec(t, source.PartitionIndexSQL("jobs", "k", source.ClockAtExpr("created_at"), "id", 2))
	cfg.Source.KeyColumn = "k"
	cfg.Handler = handlers.HandlerFunc[row](func(context.Context, *handlers.Record[row]) error {
		return errors.New("sink down") // nothing goes through: all ten rows stay behind
	})
	cfg.RetryMin, cfg.RetryMax = time.Second, time.Second
	m := ops.NewMetrics()
	m.Track("jobs")
	cfg.Observer = m.Observer()
	health := ops.NewHealth(ops.HealthConfig{Metrics: m})
	srv := httptest.NewServer(ops.NewHandler(m, health))
	t.Cleanup(srv.Close)
	require.NotEmpty(t, health.Check(context.Background()), "not ready before the process connects")

	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cfg.ClientConfig.ConnConfig})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	cfg.Client = client
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 2})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	pool := client.Pool()
	lagCtx, stopLag := context.WithCancel(context.Background())
	lagDone := make(chan error, 1)
	go func() { lagDone <- m.WatchLag(pool, 20*time.Millisecond)(lagCtx) }()
	t.Cleanup(func() { stopLag(); require.NoError(t, <-lagDone) })

	require.Eventually(t, func() bool { return len(health.Check(context.Background())) == 0 },
		20*time.Second, 10*time.Millisecond, "ready once the partitioned process works")
	require.Eventually(t, func() bool {
		return is(scraped(srv.URL+"/metrics"), "inorder_lag_rows", 10)
	}, 20*time.Second, 10*time.Millisecond, "the process's lag counts the rows behind both partitions")
	require.Greater(t, value(t, scrape(t, srv.URL+"/metrics"), "inorder_lag_seconds"), 0.0)
}
