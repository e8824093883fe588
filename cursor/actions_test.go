package cursor_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

type booking struct {
	ID int64 `db:"id"`
}

// refusal is a sink's error that carries its status code, as a webhook's does.
type refusal struct{}

func (refusal) Error() string   { return "400 Bad Request" }
func (refusal) SinkStatus() int { return 400 }

// refusingRecorder returns a recorder that refuses record refuse for good (none when 0), as a billing API
// refuses a booking.
func refusingRecorder(refuse int64) *processortest.Recorder[booking] {
	h := &processortest.Recorder[booking]{}
	if refuse != 0 {
		h.Fail(strconv.FormatInt(refuse, 10), handlers.Permanent(fmt.Errorf("billing API: %w", refusal{})))
	}
	return h
}

// logLines keeps a processor's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// await is the tests' one wait: 20s, every 5ms.
var await = testrun.Eventually

// startBilling runs process "billing" over a bookings table of n rows, refusing record refuse for good,
// retrying it between retryMin and retryMax and polling every poll, until the test ends (or stop).
func startBilling(t *testing.T, n int, refuse int64, retryMin, retryMax, poll time.Duration, opts ...func(*processor.Config[booking])) (*pgtest.DB, *processortest.Recorder[booking], func() error) {
	db, h, stop, _ := startBillingLogged(t, n, refuse, retryMin, retryMax, poll, opts...)
	return db, h, stop
}

// startBillingLogged is startBilling, keeping the processor's log lines.
func startBillingLogged(t *testing.T, n int, refuse int64, retryMin, retryMax, poll time.Duration, opts ...func(*processor.Config[booking])) (*pgtest.DB, *processortest.Recorder[booking], func() error, *logLines) {
	t.Helper()
	db, _ := setup(t)
	db.Exec(t, `CREATE TABLE bookings (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id)`)
	pgtest.AddClock(t, db, "bookings")
	db.Exec(t, "INSERT INTO bookings SELECT FROM generate_series(1, $1)", n)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	h := refusingRecorder(refuse)
	logs := &logLines{}
	cfg := processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "billing", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Source: inordertype.Source{Table: "bookings", Columns: []string{"id"}},
		Handler: h, PollInterval: poll, RetryMin: retryMin, RetryMax: retryMax, Logger: zerolog.New(logs),
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := processor.New(cfg)
	require.NoError(t, err)
	return db, h, testrun.Start(t, p.Run), logs
}

// TestActionsKeepTheirRulesThroughTheLibrary drives every rule that keeps an operator action from skipping
// a record through the library API alone, against a running processor, as a service's admin endpoint
// would: skip refuses any record but the halted one, rewind refuses to move forward (by record and by
// time), repartition refuses while an instance runs and while anything is behind.
func TestActionsKeepTheirRulesThroughTheLibrary(t *testing.T) {
	t.Parallel()
	db, h, stop := startBilling(t, 5, 3, 10*time.Millisecond, 50*time.Millisecond, 10*time.Millisecond)
	ctx := context.Background()
	status := func() cursor.Info {
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		require.NoError(t, err)
		require.Len(t, infos, 1)
		return infos[0].Info
	}
	await(t, "the halt on record 3", func() bool {
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(infos) == 1 && infos[0].Info.Halt != nil && infos[0].Info.Halt.RecordID == "3"
	})
	opts := cursor.ActionOpts{Actor: "admin-endpoint", Reason: "test"}
	halt := status().Halt
	require.True(t, halt.Permanent, "a refusal is permanent")
	require.Equal(t, 400, halt.Status, "the sink's status is kept")
	require.Contains(t, halt.Error, "billing API: 400 Bad Request")
	require.True(t, halt.NextAttemptAt.After(halt.LastFailureAt), "the next attempt is due after the last")

	_, err := cursor.Skip(ctx, db.Pool, "billing", "4", opts)
	require.ErrorIs(t, err, cursor.ErrWrongRecord, "skip of another record than the halted one")
	_, err = cursor.Skip(ctx, db.Pool, "billing", "3", cursor.ActionOpts{Actor: "admin-endpoint"})
	require.Error(t, err, "skip without a reason")
	_, err = cursor.Skip(ctx, db.Pool, "nobody", "3", opts)
	require.ErrorIs(t, err, cursor.ErrUnknownProcess)

	_, err = cursor.Rewind(ctx, db.Pool, "billing", cursor.RewindTarget{RecordID: "5"}, opts)
	require.ErrorIs(t, err, cursor.ErrForward, "rewind to a record ahead of the position")
	_, err = cursor.Rewind(ctx, db.Pool, "billing", cursor.RewindTarget{Time: time.Now().Add(time.Hour)}, opts)
	require.ErrorIs(t, err, cursor.ErrForward, "rewind to a time ahead of the position")
	_, err = cursor.Rewind(ctx, db.Pool, "billing", cursor.RewindTarget{RecordID: "42"}, opts)
	require.ErrorIs(t, err, cursor.ErrNoRecord)

	_, err = cursor.Repartition(ctx, db.Pool, "billing", 2, opts)
	require.ErrorIs(t, err, cursor.ErrBusy, "repartition while an instance runs")
	require.Equal(t, []string{"1", "2"}, h.IDs(), "no refused action moved the position")
	require.Equal(t, "3", status().Halt.RecordID)

	e, err := cursor.Skip(ctx, db.Pool, "billing", "3", opts)
	require.NoError(t, err)
	require.Equal(t, "3", e.RecordID)
	await(t, "the records after the skipped one", func() bool { return h.Len() == 4 })
	require.Equal(t, []string{"1", "2", "4", "5"}, h.IDs())

	_, err = cursor.Rewind(ctx, db.Pool, "billing", cursor.RewindTarget{RecordID: "4"}, opts)
	require.NoError(t, err, "rewind backwards")
	await(t, "the rewound records", func() bool { return h.Len() == 6 })
	require.Equal(t, []string{"1", "2", "4", "5", "4", "5"}, h.IDs())

	require.NoError(t, stop())
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO bookings SELECT FROM generate_series(1, 2)")
		return err
	}))
	_, err = cursor.Repartition(ctx, db.Pool, "billing", 2, opts)
	require.ErrorIs(t, err, cursor.ErrNotDrained, "repartition while records are behind")

	entries, err := cursor.Audit(ctx, db.Pool, cursor.AuditOpts{Process: "billing"})
	require.NoError(t, err)
	require.Len(t, entries, 2, "only the actions that happened are audited")
	require.Equal(t, "rewind", entries[0].Action)
	require.Equal(t, "skip", entries[1].Action)
}

// TestActionsTakeEffectDuringALongBackoff halts a stream on a refused record with a one-minute backoff and
// a 30s poll interval: a skip, a rewind, and a resume each take effect within a second or so (the idle probe
// watches the cursor row), not when the backoff or the poll interval ends.
func TestActionsTakeEffectDuringALongBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const soon = 10 * time.Second // well within the backoff and the poll interval
	halted := func(t *testing.T, db *pgtest.DB, id string) {
		await(t, "the halt on record "+id, func() bool {
			infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
			return err == nil && len(infos) == 1 && infos[0].Info.Halt != nil && infos[0].Info.Halt.RecordID == id
		})
	}
	ops := cursor.ActionOpts{Actor: "ops", Reason: "test"}

	for _, tc := range []struct {
		name  string
		poll  time.Duration
		probe time.Duration
	}{
		{"skip", 30 * time.Second, 0},
		// Without the probe the processor looks at its cursor row every poll interval while it waits.
		{"skip, probe off", 200 * time.Millisecond, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, h, _ := startBilling(t, 3, 2, time.Minute, time.Minute, tc.poll,
				func(c *processor.Config[booking]) { c.ProbeInterval = tc.probe })
			halted(t, db, "2")
			_, err := cursor.Skip(ctx, db.Pool, "billing", "2", ops)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return h.Len() == 2 }, soon, 5*time.Millisecond,
				"the record after the skipped one, well before the backoff ends")
			require.Equal(t, []string{"1", "3"}, h.IDs())
		})
	}
	t.Run("rewind", func(t *testing.T) {
		t.Parallel()
		db, h, _ := startBilling(t, 3, 2, time.Minute, time.Minute, 30*time.Second)
		halted(t, db, "2")
		_, err := cursor.Rewind(ctx, db.Pool, "billing", cursor.RewindTarget{RecordID: "1"}, ops)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return h.Len() == 2 }, soon, 5*time.Millisecond,
			"record 1 delivered again, well before the backoff ends")
		require.Equal(t, []string{"1", "1"}, h.IDs())
		halted(t, db, "2")
	})
	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		db, h, _, logs := startBillingLogged(t, 3, 2, time.Minute, time.Minute, 30*time.Second)
		halted(t, db, "2")
		_, err := cursor.Pause(ctx, db.Pool, "billing", ops)
		require.NoError(t, err)
		_, err = cursor.Skip(ctx, db.Pool, "billing", "2", ops)
		require.NoError(t, err)
		await(t, "the processor paused", func() bool { return logs.has("paused by an operator") })
		require.Equal(t, []string{"1"}, h.IDs(), "nothing delivered while paused")
		_, err = cursor.Resume(ctx, db.Pool, "billing", ops)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return h.Len() == 2 }, soon, 5*time.Millisecond,
			"the record after the skipped one once resumed, well before the backoff and the poll interval end")
		require.Equal(t, []string{"1", "3"}, h.IDs())
	})
	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		db, h, _, logs := startBillingLogged(t, 3, 2, time.Minute, time.Minute, 30*time.Second)
		halted(t, db, "2")
		_, err := cursor.Resume(ctx, db.Pool, "billing", ops)
		require.ErrorIs(t, err, cursor.ErrNotPaused, "a resume of a stream that is not paused says so")
		h.Fail("2", nil) // the sink is fixed
		e, err := cursor.Retry(ctx, db.Pool, "billing", ops)
		require.NoError(t, err)
		require.Equal(t, "2", e.RecordID)
		require.Eventually(t, func() bool { return h.Len() == 3 }, soon, 5*time.Millisecond,
			"the fixed record and the next, well before the one-minute backoff ends")
		require.Equal(t, []string{"1", "2", "3"}, h.IDs())
		require.True(t, logs.has("retrying the record now, as an operator asked"))
		_, err = cursor.Retry(ctx, db.Pool, "billing", ops)
		require.ErrorIs(t, err, cursor.ErrNotHalted, "nothing to retry")
		entries, err := cursor.Audit(ctx, db.Pool, cursor.AuditOpts{Process: "billing"})
		require.NoError(t, err)
		require.Len(t, entries, 1, "only the retry is audited, not the refused resume nor the refused retry")
		require.Equal(t, "retry", entries[0].Action)
		require.Equal(t, "2", entries[0].RecordID)
	})
}

// TestASkipClearsEveryPartOfTheHalt: after a skip the cursor row keeps nothing of the halted record, its
// halted_at included, as after the processor's own advance past a record that went through.
func TestASkipClearsEveryPartOfTheHalt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The halted record is the last: no advance of the processor's clears anything after the skip.
	db, h, _ := startBilling(t, 2, 2, time.Minute, time.Minute, 30*time.Second)
	await(t, "the halt on record 2", func() bool {
		infos, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(infos) == 1 && infos[0].Info.Status == cursor.StatusHalted
	})
	_, err := cursor.Skip(ctx, db.Pool, "billing", "2", cursor.ActionOpts{Actor: "ops", Reason: "closed account"})
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, h.IDs())
	var left string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT concat_ws(',',
			CASE WHEN halted_record_id IS NOT NULL THEN 'record' END, CASE WHEN halted_error IS NOT NULL THEN 'error' END,
			CASE WHEN halted_attempts <> 0 THEN 'attempts' END, CASE WHEN halted_first_failure_at IS NOT NULL THEN 'first' END,
			CASE WHEN halted_last_failure_at IS NOT NULL THEN 'last' END, CASE WHEN halted_permanent THEN 'permanent' END,
			CASE WHEN halted_status IS NOT NULL THEN 'status' END, CASE WHEN halted_next_attempt_at IS NOT NULL THEN 'next' END,
			CASE WHEN halted_at IS NOT NULL THEN 'halted_at' END)
		FROM inorder.cursor WHERE process_name = 'billing'`).Scan(&left))
	require.Empty(t, left, "what the skip left of the halt")
}
