package processor

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/migrations"
)

// listen keeps its Client's listener (see Client.listen) LISTENing for the insert trigger's notifications
// (see migrations.CreateNotifyTrigger), and wakes the loop when its table is named. It never decides what
// is read: a notification only makes the processor look sooner, and while the listener is down the loop
// polls as it always does.
func (p *Processor[T]) listen(ctx context.Context) {
	var checked atomic.Bool
	// One listener for the client's processors: a connection per instance, not per process.
	p.cfg.Client.listen(ctx, &subscription{table: p.listened.Qualified, wake: p.wakeUp,
		connected: func() {
			if !checked.Load() && p.checkNotifyTrigger(ctx) == nil {
				checked.Store(true)
			}
			p.log.Info().Msg("listening for insert notifications")
			p.wakeUp() // rows may have arrived while nobody listened
		},
		lost: func(err error) {
			p.log.Warn().Err(err).Str("poll_interval", p.cfg.PollInterval.String()).
				Msg("wake-up listener lost; polling until it is back")
		}})
}

// warnNoTrigger warns when the table has no insert-notification trigger, which listening needs.
func (p *Processor[T]) warnNoTrigger(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1 AND tgname = $2)",
		p.listened.OID, migrations.NotifyTriggerName).Scan(&exists); err != nil {
		return fmt.Errorf("look for the notify trigger: %w", err)
	}
	if !exists {
		p.log.Warn().Str("table", p.listened.Qualified).Msgf("no insert-notification trigger on the table, so "+
			"nothing will wake this processor before its poll interval; create it with: inorder migrate --notify %s",
			p.listened.Qualified)
	}
	return nil
}

// checkNotifyTrigger is warnNoTrigger on a connection of the client's pool.
func (p *Processor[T]) checkNotifyTrigger(ctx context.Context) error {
	ctx, cancel := p.bounded(ctx)
	defer cancel()
	return p.warnNoTrigger(ctx, p.cfg.Client.Pool())
}

// wakeUp asks the loop to look now. Wake-ups coalesce: many notifications during a batch make one more
// look, not many.
func (p *Processor[T]) wakeUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// idle waits d, or until ctx is done, or, when wakeable, until a notification wakes the loop. It reports
// whether the wait ended early because there may be something to do: a notification, or the probe seeing
// a row after the position or a change to the cursor row (see probe.go).
//
// With the probe, a wakeable wait also watches for rows after the position (see probesRows), and every
// wait watches the cursor row, so an operator's action ends it.
func (p *Processor[T]) idle(ctx context.Context, d time.Duration, wakeable bool) bool {
	var wake chan struct{}
	if wakeable {
		wake = p.wake
	}
	if p.prober != nil && p.role == roleOwner {
		start := time.Now()
		found, ok := p.renewedWait(ctx, d, wakeable && p.probesRows(), wake)
		if ok || ctx.Err() != nil {
			return found
		}
		// The probe failed: wait out the poll interval (at most what was left) without it.
		d = min(d-time.Since(start), p.cfg.PollInterval)
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
		return true
	}
	return false
}

// renewedWait is probeWait for up to d, in stretches that end where the lease would need the owner's own
// batch: a wait longer than a third of the lease relies on the probe to renew it (see store.Renewal), and
// goes on after each stretch only while the probe did. An owner whose lease the probe did not renew by half
// of it (the probe failed, or the row was locked or changed) ends its wait there, and its batch renews the
// lease as without the probe, or learns that the process is no longer its own.
func (p *Processor[T]) renewedWait(ctx context.Context, d time.Duration, rows bool, wake <-chan struct{}) (found, ok bool) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		until := p.cur.LeaseUntil()
		if until.IsZero() || p.cur.ProbeRenewal() == nil {
			// The owner's own batch renews the lease, at a third of it.
			return p.probeWait(ctx, min(left, p.cfg.Lease/3), rows, wake)
		}
		// Half the lease: the owner's own renewal is due at a third, and must have time to be made.
		if left = min(left, time.Until(until.Add(-p.cfg.Lease/2))); left <= 0 {
			return false, true
		}
		if p.fleet != nil {
			left = min(left, p.fleetLookEvery())
		}
		found, ok = p.probeWait(ctx, left, rows, wake)
		if found || !ok || ctx.Err() != nil || !time.Now().Before(end) {
			return found, ok
		}
		if p.overShare(ctx) {
			return true, true // a batch, after which the process is handed over (see shareWork)
		}
	}
}
