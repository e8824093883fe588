package store_test

import (
	"context"
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
	fail := func(halt bool, attempts int) inordertype.Halt {
		t.Helper()
		ok, err := repo.Lock.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		h, err := repo.Position.RecordFailure(ctx, inordertype.Position{}, store.Failure{RecordID: "7", Error: "503 from the sink",
			Attempts: attempts, RetryIn: time.Second, Halt: halt})
		require.NoError(t, err)
		require.NoError(t, repo.Lock.Unlock(ctx))
		return h
	}
	h := fail(false, 1)
	require.Equal(t, 1, h.Attempts)
	db.Exec(t, "UPDATE inorder.cursor SET halted_first_failure_at = clock_timestamp() - interval '1 hour' WHERE process_name = 'orders'")

	h = fail(false, 2)
	require.Equal(t, 2, h.Attempts)
	require.True(t, h.HaltedAt.IsZero(), "failing for an hour, but the verdict is to retry")
	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow))
	require.WithinDuration(t, dbNow, repo.Lease.Now(), time.Second, "the processor's clock is the database's")
	require.InDelta(t, time.Hour.Seconds(), repo.Lease.Now().Sub(h.FirstFailureAt).Seconds(), 5,
		"measured on the row's clock, the record has failed for an hour")

	h = fail(true, 3)
	require.False(t, h.HaltedAt.IsZero(), "the verdict is to halt")
	first := h.HaltedAt
	h = fail(true, 4)
	require.Equal(t, first, h.HaltedAt, "a halted record keeps when it halted")
	h = fail(false, 5)
	require.True(t, h.HaltedAt.IsZero())
}

// TestAFailureIsWrittenAsHanded: RecordFailure is the completer of a failing record: it writes the value
// the processor built and nothing else. Read back from the cursor row, every fate's value (retrying,
// retrying again, the sink's outage, halted, another record) is the one handed in: the store counts no
// attempt itself, clears no verdict, and times the next attempt from the failure by the database's clock.
func TestAFailureIsWrittenAsHanded(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db, cfg := setup(t)
	ctx := context.Background()
	repo, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NoError(t, repo.Claim())
	defer repo.Release(ctx) //nolint:errcheck // the test's end
	outage := "the sink: records of different keys all meet status 400"
	for _, tc := range []struct {
		name string
		f    store.Failure
	}{
		// Attempts that no count of the store's would give: the first failure of a record already
		// counted at 3, then 5 for its next.
		{"retrying", store.Failure{RecordID: "7", Error: "503 from the sink", Attempts: 3, Status: 503,
			RetryIn: 1500 * time.Millisecond}},
		{"retrying again", store.Failure{RecordID: "7", Error: "503 from the sink", Attempts: 5, Status: 503,
			RetryIn: 4 * time.Second}},
		{"the sink's outage", store.Failure{RecordID: "7", Error: "400 from the sink", Attempts: 6, Status: 400,
			RetryIn: 2 * time.Second, Unavailable: outage}},
		{"halted", store.Failure{RecordID: "7", Error: "422 from the sink", Attempts: 7, Permanent: true, Status: 422,
			RetryIn: time.Minute, Halt: true}},
		{"another record", store.Failure{RecordID: "8", Error: "timeout", Attempts: 2, RetryIn: time.Second}},
		// Not a value the processor builds (its outage is never permanent, and never halts): the store
		// writes it all the same, since it has no verdict of its own.
		{"judged by the processor alone", store.Failure{RecordID: "8", Error: "410 from the sink", Attempts: 3,
			Permanent: true, Status: 410, RetryIn: time.Second, Halt: true, Unavailable: outage}},
	} {
		ok, err := repo.Lock.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		h, err := repo.Position.RecordFailure(ctx, inordertype.Position{}, tc.f)
		require.NoError(t, err, tc.name)
		require.NoError(t, repo.Lock.Unlock(ctx))

		var row store.Failure
		var halted bool
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT halted_record_id, halted_error, halted_attempts, halted_permanent, coalesce(halted_status, 0),
			       halted_next_attempt_at - halted_last_failure_at, halted_at IS NOT NULL,
			       coalesce(halted_unavailable, '')
			FROM inorder.cursor WHERE process_name = 'orders'`).
			Scan(&row.RecordID, &row.Error, &row.Attempts, &row.Permanent, &row.Status, &row.RetryIn, &halted,
				&row.Unavailable), tc.name)
		row.Halt = halted
		require.Equal(t, tc.f, row, "%s: the cursor row holds the value handed in, unchanged", tc.name)
		require.Equal(t, tc.f.Attempts, h.Attempts, tc.name)
		require.Equal(t, tc.f.RetryIn, h.NextAttemptAt.Sub(h.LastFailureAt), "%s: one clock, the statement's", tc.name)
		require.Equal(t, tc.f.Halt, !h.HaltedAt.IsZero(), tc.name)
	}
}

// TestAParkedRecordIsWrittenAsHanded: Park and RedriveFailed write a parked record's failure as the
// processor counted it: the attempts handed in, not the store's count.
func TestAParkedRecordIsWrittenAsHanded(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db, cfg := setup(t)
	ctx := context.Background()
	repo, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NoError(t, repo.Claim())
	defer repo.Release(ctx) //nolint:errcheck // the test's end
	pk := store.Parked{Key: "k", Position: inordertype.Position{CreatedAt: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), ID: "7"},
		Error: "422 from the sink", Status: 422, Permanent: true, Attempts: 4}
	read := func() store.Parked {
		t.Helper()
		got := store.Parked{Key: "k", Position: pk.Position}
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT error, coalesce(status, 0), permanent, attempts FROM inorder.parked
			WHERE process_name = 'orders' AND record_id = '7'`).Scan(&got.Error, &got.Status, &got.Permanent, &got.Attempts))
		return got
	}
	for _, write := range []func() error{
		func() error { return repo.Parking.Park(ctx, pk) },
		func() error {
			pk.Error, pk.Status, pk.Permanent, pk.Attempts = "503 from the sink", 503, false, 9
			return repo.Parking.RedriveFailed(ctx, pk)
		},
	} {
		ok, err := repo.Lock.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, write())
		require.NoError(t, repo.Lock.Unlock(ctx))
		require.Equal(t, pk, read(), "the parked row holds the value handed in")
	}
}
