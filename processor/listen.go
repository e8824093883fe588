package processor

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/migrations"
)

// waiter waits between batches: a poll interval, cut short by a notification of the insert trigger
// (Config.Listen, below), or by the answer of the probe its processor shares with the others of its store
// (see probe.go), which renews an owner's lease meanwhile. It is used by the processor's goroutine, but
// for wakeUp, which the listener's goroutine calls.
type waiter struct {
	wake chan struct{}
	// prober is the probe shared with the other processors of the database, or nil; probeGap is its
	// current interval (see probe.go), and lastRecords when a batch last handled records.
	prober      *sharedProbe
	probeGap    time.Duration
	lastRecords time.Time
	// listened is the table as the listener's goroutine names it: the reader's table when it started, which
	// a migration of the source replaces while it runs (the name and the relation stay).
	listened *source.Table
	// fleet is the instance's share of its fleet's work, nil for a partition: a quiet owner's wait looks
	// at it (see renewedWait).
	fleet *sharer
	// woke is when the last wait was woken for rows (a notification, or the probe's answer that rows lie
	// after the position): a poll of the transactions in flight sent after it sees them. Zero: not woken.
	woke time.Time
	// notified is when wakeUp was last called (Unix nanoseconds), by the listener's goroutine: what a
	// notification woke the wait for had committed by then.
	notified atomic.Int64
	// pollInterval, probeInterval and lease are Config.PollInterval, ProbeInterval and Lease.
	pollInterval, probeInterval, lease time.Duration
	cur                                *store.Repository // set when the processor opens its cursor
	log                                zerolog.Logger
}

// newWaiter returns the waiter of a processor configured by cfg (its defaults set).
func newWaiter[T any](cfg *Config[T], log zerolog.Logger) waiter {
	return waiter{wake: make(chan struct{}, 1), pollInterval: cfg.PollInterval, probeInterval: cfg.ProbeInterval,
		lease: cfg.Lease, log: log}
}

// idleWatch is what one idle wait looks at: whether this instance owns the process, whether the last
// batch found the horizon held for long (see lastBatch), and the rows a batch could read now: of table,
// below now less margin, its columns' fingerprint known (see probeCond).
type idleWatch struct {
	owner, heldLong bool
	table           *source.Table
	margin          time.Duration
	known           string
}

// listen keeps its Client's listener (see Client.listen) LISTENing for the insert trigger's notifications
// (see migrations.CreateNotifyTrigger), and wakes the loop when its table is named. It never decides what
// is read: a notification only makes the processor look sooner, and while the listener is down the loop
// polls as it always does.
func (w *waiter) listen(ctx context.Context, c *Client) {
	var checked atomic.Bool
	// One listener for the client's processors: a connection per instance, not per process.
	c.listen(ctx, &subscription{table: w.listened.Qualified, wake: w.wakeUp,
		connected: func() {
			if !checked.Load() && w.checkNotifyTrigger(ctx, c) == nil {
				checked.Store(true)
			}
			w.log.Info().Msg("listening for insert notifications")
			w.wakeUp() // rows may have arrived while nobody listened
		},
		lost: func(err error) {
			w.log.Warn().Err(err).Str("poll_interval", w.pollInterval.String()).
				Msg("wake-up listener lost; polling until it is back")
		}})
}

// warnNoTrigger warns when the table has no insert-notification trigger, which listening needs.
func (w *waiter) warnNoTrigger(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2)",
		w.listened.OID, migrations.NotifyTriggerName).Scan(&exists); err != nil {
		return fmt.Errorf("look for the notify trigger: %w", err)
	}
	if !exists {
		w.log.Warn().Str("table", w.listened.Qualified).Msgf("no insert-notification trigger on the table, so "+
			"nothing will wake this processor before its poll interval; create it with: inorder migrate --notify %s",
			w.listened.Qualified)
	}
	return nil
}

// checkNotifyTrigger is warnNoTrigger on a connection of the client's pool.
func (w *waiter) checkNotifyTrigger(ctx context.Context, c *Client) error {
	ctx, cancel := w.cur.Session.Bounded(ctx)
	defer cancel()
	return w.warnNoTrigger(ctx, c.Pool())
}

// wakeUp asks the loop to look now. Wake-ups coalesce: many notifications during a batch make one more
// look, not many.
func (w *waiter) wakeUp() {
	w.notified.Store(time.Now().UnixNano())
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// notifiedAt is when a wake-up was last asked for (see notified).
func (w *waiter) notifiedAt() time.Time { return time.Unix(0, w.notified.Load()) }

// idle waits d, or until ctx is done, or, when wakeable, until a notification wakes the loop. It reports
// whether the wait ended early because there may be something to do: a notification, or the probe seeing
// a row after the position or a change to the cursor row (see probe.go).
//
// With the probe, a wakeable wait also watches for rows after the position (see probesRows), and every
// wait watches the cursor row, so an operator's action ends it. iw is what the wait looks at.
func (w *waiter) idle(ctx context.Context, d time.Duration, wakeable bool, iw idleWatch) bool {
	var wake chan struct{}
	if wakeable {
		wake = w.wake
	}
	if w.prober != nil && iw.owner {
		start := time.Now()
		found, ok := w.renewedWait(ctx, d, wakeable && w.probesRows(iw.owner, iw.heldLong), wake, iw)
		if ok || ctx.Err() != nil {
			return found
		}
		// The probe failed: wait out the poll interval (at most what was left) without it.
		d = min(d-time.Since(start), w.pollInterval)
		if d <= 0 {
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
		w.woke = w.notifiedAt()
		return true
	}
	return false
}

// renewedWait is probeWait for up to d, in stretches that end where the lease would need the owner's own
// batch: a wait longer than a third of the lease relies on the probe to renew it (see store.Renewal), and
// goes on after each stretch only while the probe did. An owner whose lease the probe did not renew by half
// of it (the probe failed, or the row was locked or changed) ends its wait there, and its batch renews the
// lease as without the probe, or learns that the process is no longer its own.
func (w *waiter) renewedWait(ctx context.Context, d time.Duration, rows bool, wake <-chan struct{}, iw idleWatch) (found, ok bool) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		until := w.cur.Lease.LeaseUntil()
		if until.IsZero() || w.cur.Lease.ProbeRenewal() == nil {
			// The owner's own batch renews the lease, at a third of it.
			return w.probeWait(ctx, min(left, w.lease/3), rows, wake, iw)
		}
		// Half the lease: the owner's own renewal is due at a third, and must have time to be made.
		if left = min(left, time.Until(until.Add(-w.lease/2))); left <= 0 {
			return false, true
		}
		if w.fleet != nil {
			left = min(left, w.fleet.lookEvery())
		}
		found, ok = w.probeWait(ctx, left, rows, wake, iw)
		if found || !ok || ctx.Err() != nil || !time.Now().Before(end) {
			return found, ok
		}
		if w.fleet != nil && w.fleet.overShare(ctx) {
			return true, true // a batch, after which the process is handed over (see shareWork)
		}
	}
}
