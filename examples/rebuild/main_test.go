package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

func fast(cfg *processor.Config[accountEvent]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.BatchSize = 200
}

// start runs version v of the example until the test ends or Stop.
func start(t *testing.T, db *processortest.DB, v int) *processortest.Running {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).With().Int("version", v).Logger()
	return processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, db.URL, v, log, fast)
	}), nil)
}

func appendEvents(t *testing.T, db *processortest.DB, n int) {
	t.Helper()
	db.Exec(t, `INSERT INTO account_events (account_id, amount)
		SELECT 'acc-' || (g % 11), CASE WHEN g % 4 = 0 THEN -(g % 300) ELSE g % 1000 END FROM generate_series(1, $1) g`, n)
}

type balance struct {
	AccountID string
	Balance   int64
	Events    int64
}

func query(t *testing.T, db *processortest.DB, sql string) []balance {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[balance])
	require.NoError(t, err)
	return out
}

// TestRebuildWithoutStoppingTheServingVersion: version 1 serves while events keep coming; version 2
// rebuilds beside it from the beginning, takes the view over once caught up, and forgets version 1's
// process once it stops. The application's reads never fail nor fall back to a version that has not
// caught up, and in the end the view holds exactly the sum of every event.
func TestRebuildWithoutStoppingTheServingVersion(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)
	v1 := start(t, db, 1)
	processortest.WaitCaughtUp(t, db, process(1), &processortest.WaitOpts{Timeout: 30 * time.Second})
	appendEvents(t, db, 5000)
	processortest.WaitCaughtUp(t, db, process(1), &processortest.WaitOpts{Timeout: 30 * time.Second})

	// The application: a writer appending events, and a reader of the view.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The events the view counts may fall back at the switch by what version 2 had yet to project: less
	// than a second of the writer's events, far fewer than a version that has not caught up lacks.
	const fallBack = 1000
	var reads, behind atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		seen := int64(0)
		for ctx.Err() == nil {
			var n int64
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(sum(events), 0)::bigint FROM balances").Scan(&n); err != nil {
				if ctx.Err() == nil {
					readErr <- err
				}
				return
			}
			reads.Add(1)
			if n < seen-fallBack {
				behind.Add(1)
			}
			seen = max(seen, n)
		}
	}()
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for ctx.Err() == nil {
			// Each insert runs to its end (not cut off by ctx, which could leave it committing after the
			// test has summed the events); the loop stops between inserts.
			if _, err := db.Pool.Exec(context.Background(), `INSERT INTO account_events (account_id, amount) VALUES ('acc-live', 1)`); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(2 * time.Millisecond) // the application's own pace, not a synchronisation
		}
	}()

	start(t, db, 2)
	require.Eventually(t, func() bool {
		var def string
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT pg_get_viewdef('balances')").Scan(&def))
		return strings.Contains(def, "balances_v2")
	}, 60*time.Second, 20*time.Millisecond, "version 2 takes the view over")
	procs, err := cursor.Read(context.Background(), db.Pool, cursor.ReadOpts{Process: process(1)})
	require.NoError(t, err)
	require.Len(t, procs, 1, "version 1's process stays while it runs")

	require.NoError(t, v1.Stop())
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), db.Pool, cursor.ReadOpts{Process: process(1)})
		require.NoError(t, err)
		return len(procs) == 0
	}, 30*time.Second, 20*time.Millisecond, "version 2 forgets version 1's process once it stopped")
	entries, err := cursor.Audit(context.Background(), db.Pool, cursor.AuditOpts{Process: process(1)})
	require.NoError(t, err)
	require.Equal(t, "forget", entries[0].Action)

	cancel()
	<-writing
	select {
	case err := <-readErr:
		t.Fatalf("a read of the view failed: %v", err)
	default:
	}
	require.Greater(t, reads.Load(), int64(10))
	require.Zero(t, behind.Load(), "the view never fell back to a version that had not caught up")
	processortest.WaitCaughtUp(t, db, process(2), &processortest.WaitOpts{Timeout: 30 * time.Second})
	require.Equal(t,
		query(t, db, `SELECT account_id, sum(amount)::bigint, count(*) FROM account_events GROUP BY account_id ORDER BY account_id`),
		query(t, db, "SELECT account_id, balance, events FROM balances ORDER BY account_id"),
		"the view holds the sum of every event, each once")

	// Version 1, restarted by mistake, refuses: it would take nothing back, but it would project every
	// event again into a table nobody reads.
	err = run(context.Background(), db.URL, 1, zerolog.New(zerolog.NewTestWriter(t)), fast)
	require.ErrorContains(t, err, "version 2 serves the application: version 1 is retired")
	procs, err = cursor.Read(context.Background(), db.Pool, cursor.ReadOpts{Process: process(1)})
	require.NoError(t, err)
	require.Empty(t, procs, "the retired version registered nothing")
}
