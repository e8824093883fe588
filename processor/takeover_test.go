package processor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
)

// Two instances that start a new process together both find it unregistered; only the one whose insert
// creates the cursor row says "registered a new process". A test transaction holds a row of that name
// uncommitted, so both instances look, find nothing, and wait on their inserts until it rolls back.
func TestOnlyTheInstanceThatRegistersAProcessSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "INSERT INTO inorder.cursor (process_name) VALUES ($1)", b.cfg.Process)
	require.NoError(t, err)

	var logs testrun.Buffer
	for _, instance := range []string{"one", "two"} {
		cfg := b.cfg
		cfg.StartFrom = inordertype.StartFrom{} // the table is empty: a new process starts at the beginning
		cfg.ClientConfig.Instance = instance
		cfg.Logger = zerolog.New(&logs).With().Str("instance", instance).Logger()
		start(t, cfg)
	}
	waitFor(t, "both instances to wait on their inserts of the cursor row", func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO inorder.cursor%'`).Scan(&n))
		return n == 2
	})
	require.NoError(t, tx.Rollback(ctx))
	ids := b.insert(t, 3)
	waitFor(t, "the record to be delivered", func() bool { return b.h.count() >= len(ids) })
	require.Equal(t, ids, b.h.ids())
	waitFor(t, "both instances to run the process", func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inorder.instance WHERE process_name = $1`,
			b.cfg.Process).Scan(&n))
		return n == 2
	})
	require.Equal(t, 1, strings.Count(logs.String(), "registered a new process"), "one line, from the instance that inserted the row:\n%s",
		logs.String())
}

// A new owner tries a failing record at once, rather than waiting out the backoff the owner before it
// recorded: a replica started with a corrected setting delivers at once.
func TestANewOwnerDoesNotWaitOutTheBackoffOfTheOwnerBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 2)
	failing := newCollector()
	failing.setFail(ids[0], errTest)
	first := b.cfg
	first.ClientConfig.Instance, first.Handler = "wrong", failing
	first.RetryMin, first.RetryMax = time.Minute, time.Minute // the recorded next attempt is a minute away
	stopFirst := start(t, first)
	waitFor(t, "the failing record's next attempt to be recorded", func() bool {
		var next *time.Time
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			"SELECT max(halted_next_attempt_at) FROM inorder.cursor WHERE process_name = $1", b.cfg.Process).Scan(&next))
		return next != nil && time.Until(*next) > 30*time.Second
	})
	require.NoError(t, stopFirst())

	began := time.Now()
	second := b.cfg
	second.ClientConfig.Instance = "fixed"
	second.RetryMin, second.RetryMax = time.Minute, time.Minute
	start(t, second)
	waitFor(t, "the new owner to deliver the record that failed", func() bool { return b.h.count() >= len(ids) })
	t.Logf("delivered %s after the new owner started", time.Since(began))
	require.Equal(t, ids, b.h.ids())
	require.Less(t, time.Since(began), 30*time.Second, "well before the backoff recorded by the owner before")
}
