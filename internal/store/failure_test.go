package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// TestAFailureIsRecordedAsJudged: the store records the processor's verdict on a failure and does not judge
// it again. A record failing for an hour by the row's clock stays retrying when the verdict says so, and
// halts the moment the verdict says halt, keeping when it first halted; the clock the processor judges by
// is the database's, the one that stamped the row.
func TestAFailureIsRecordedAsJudged(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db, cfg := setup(t)
	ctx := context.Background()
	repo, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NoError(t, repo.Claim())
	defer repo.Release(ctx) //nolint:errcheck // the test's end
	fail := func(halt bool) inordertype.Halt {
		t.Helper()
		ok, err := repo.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		h, err := repo.RecordFailure(ctx, inordertype.Position{}, store.Failure{RecordID: "7", Err: errors.New("503 from the sink"),
			RetryIn: func(int) time.Duration { return time.Second }, Halt: halt})
		require.NoError(t, err)
		require.NoError(t, repo.Unlock(ctx))
		return h
	}
	h := fail(false)
	require.Equal(t, 1, h.Attempts)
	db.Exec(t, "UPDATE inorder.cursor SET halted_first_failure_at = clock_timestamp() - interval '1 hour' WHERE process_name = 'orders'")

	h = fail(false)
	require.Equal(t, 2, h.Attempts)
	require.True(t, h.HaltedAt.IsZero(), "failing for an hour, but the verdict is to retry")
	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow))
	require.WithinDuration(t, dbNow, repo.Now(), time.Second, "the processor's clock is the database's")
	require.InDelta(t, time.Hour.Seconds(), repo.Now().Sub(h.FirstFailureAt).Seconds(), 5,
		"measured on the row's clock, the record has failed for an hour")

	h = fail(true)
	require.False(t, h.HaltedAt.IsZero(), "the verdict is to halt")
	first := h.HaltedAt
	h = fail(true)
	require.Equal(t, first, h.HaltedAt, "a halted record keeps when it halted")
	h = fail(false)
	require.True(t, h.HaltedAt.IsZero())
}
