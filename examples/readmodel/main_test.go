package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// fast shortens the processor's timings for tests, and keeps batches small so that a stop often lands in
// the middle of one.
func fast(cfg *processor.Config[accountEvent]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
	cfg.BatchSize = 25
}

// start runs the example until the test ends; Stop ends it early and returns what run returned.
func start(t *testing.T, db *processortest.DB, checkpoint processor.Checkpoint) *processortest.Running {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t))
	return processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, db.URL, checkpoint, log, fast)
	}), nil)
}

// appendEvents appends n events spread over seven accounts, every third one a withdrawal, in one statement.
func appendEvents(t *testing.T, db *processortest.DB, n int) {
	t.Helper()
	db.Exec(t, `
		INSERT INTO account_events (account_id, type, amount)
		SELECT 'acc-' || (g % 7),
		       CASE WHEN g % 3 = 0 THEN 'withdrawal' ELSE 'deposit' END,
		       1 + (g * 37) % 1000
		FROM generate_series(1, $1) g`, n)
}

// balance is one account's row of the read model.
type balance struct {
	AccountID string
	Balance   int64
	Events    int64
}

func balances(t *testing.T, db *processortest.DB) []balance {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT account_id, balance, events FROM balances ORDER BY account_id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[balance])
	require.NoError(t, err)
	return out
}

// expected computes the balances from the events up to the durable position, straight from the source:
// what the read model must hold at any moment the processor is stopped.
func expected(t *testing.T, db *processortest.DB) []balance {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT e.account_id,
		       sum(CASE e.type WHEN 'deposit' THEN e.amount ELSE -e.amount END)::bigint,
		       count(*)
		FROM account_events e
		JOIN inorder.position c ON c.process_name = $1
		WHERE (e.created_at, e.id) <= (c.position_created_at, c.position_id::bigint)
		GROUP BY e.account_id
		ORDER BY e.account_id`, process)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[balance])
	require.NoError(t, err)
	return out
}

func projected(t *testing.T, db *processortest.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT coalesce(sum(events), 0)::bigint FROM balances").Scan(&n))
	return n
}

// TestBalancesExactlyOnce projects events, stops the processor in the middle of the stream, appends more
// while it is stopped and while it runs again, and restarts it once more. After every stop the balances
// must equal the sum of the events up to the durable position, and in the end the sum of all events: an
// event counted twice or missed changes a balance or an event count. Both checkpoint modes must hold it.
func TestBalancesExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, checkpoint := range []processor.Checkpoint{processor.CheckpointRecord, processor.CheckpointBatch} {
		t.Run(string(checkpoint), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := processortest.NewDB(t, nil)
			require.NoError(t, setup(ctx, db.URL))
			appendEvents(t, db, 5000)

			// First run: stopped as soon as part of the stream is projected, often in the middle of a batch.
			example := start(t, db, checkpoint)
			require.Eventually(t, func() bool { return projected(t, db) >= 100 }, 30*time.Second, time.Millisecond)
			require.NoError(t, example.Stop())
			require.Equal(t, expected(t, db), balances(t, db), "after the first stop")
			n := projected(t, db)
			t.Logf("the first run projected %d of 5000 events", n)
			require.Less(t, n, int64(5000), "the first run was stopped before the end of the stream")

			// Second run: events appended while stopped and, by concurrent writers, while running.
			appendEvents(t, db, 300)
			example = start(t, db, checkpoint)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 25 {
						_, err := db.Pool.Exec(ctx, `
							INSERT INTO account_events (account_id, type, amount) VALUES ('acc-live', 'deposit', 3)`)
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			processortest.WaitCaughtUp(t, db, process, &processortest.WaitOpts{Timeout: 2 * time.Minute}) // 5,400 commits, on a busy machine
			require.NoError(t, example.Stop())
			require.Equal(t, expected(t, db), balances(t, db), "after the second stop")
			require.EqualValues(t, 5000+300+100, projected(t, db), "every event projected once")

			// Third run: nothing is projected again on restart; one new event is, once.
			example = start(t, db, checkpoint)
			appendEvents(t, db, 1)
			processortest.WaitCaughtUp(t, db, process, &processortest.WaitOpts{Timeout: 2 * time.Minute})
			require.NoError(t, example.Stop())
			require.Equal(t, expected(t, db), balances(t, db), "after the third stop")
			require.EqualValues(t, 5000+300+100+1, projected(t, db), "every event projected once")

			var total int64
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT balance FROM balances WHERE account_id = 'acc-live'").Scan(&total))
			require.EqualValues(t, 100*3, total)
		})
	}
}
