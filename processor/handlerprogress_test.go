package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
)

// The handler timeout of the tests of a handler that reports progress, and how often it reports.
const (
	progressTimeout = 300 * time.Millisecond
	progressEvery   = 50 * time.Millisecond
)

// progressCall is one call of a reporting handler: who made it, when it began, when it last reported
// progress, when it ended, and what the cursor row said of the lease when it began.
type progressCall struct {
	instance               string
	attempt                int
	began, reported, ended time.Time
	leaseExpires           time.Time
	err                    error
}

// reporter is a handler that reports progress (handlers.Progress) every progressEvery for as long as
// reportFor says, then waits for its context, or returns nil when it says so.
type reporter struct {
	t *testing.T
	b *bundle
	// reportFor is how long a call of the given attempt reports progress (negative: until its context
	// ends), and whether it then succeeds rather than wait for its context.
	reportFor func(attempt int) (time.Duration, bool)
	// haltedError, when set, receives what the cursor row says of the failure before a second attempt.
	haltedError chan string

	mu    sync.Mutex
	calls []progressCall
}

func (r *reporter) handler(instance string) handlers.Handler[event] {
	return handlers.HandlerFunc[event](func(ctx context.Context, rec *handlers.Record[event]) error {
		c := progressCall{instance: instance, attempt: rec.Attempt, began: time.Now()}
		var expires *time.Time
		var halted *string
		if err := r.b.db.Pool.QueryRow(context.Background(), `SELECT lease_expires_at, halted_error
			FROM inorder.cursor WHERE process_name = $1`, r.b.cfg.Process).Scan(&expires, &halted); err != nil {
			r.t.Errorf("reading the cursor row: %v", err)
		}
		if expires != nil {
			c.leaseExpires = *expires
		}
		if rec.Attempt == 2 && r.haltedError != nil && halted != nil {
			r.haltedError <- *halted
		}
		report, succeed := r.reportFor(rec.Attempt)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for done := false; !done; {
			select {
			case <-ctx.Done():
				c.err, done = ctx.Err(), true
			case <-tick.C:
				switch {
				case report < 0 || time.Since(c.began) < report:
					c.reported = time.Now()
					handlers.Progress(ctx)
				case succeed:
					done = true
				default:
					tick.Stop() // silent from now on
				}
			}
		}
		c.ended = time.Now()
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
		return c.err
	})
}

func (r *reporter) snapshot() []progressCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]progressCall(nil), r.calls...)
}

// TestAHandlerReportingProgressOutlivesItsTimeout: a handler that reports progress every 50ms for 1.5s,
// five times its 300ms timeout, is not cut off: the record is delivered once, and the position moves past
// it.
func TestAHandlerReportingProgressOutlivesItsTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := &reporter{t: t, b: b, reportFor: func(int) (time.Duration, bool) { return 1500 * time.Millisecond, true }}
	b.cfg.Handler, b.cfg.HandlerTimeout = r.handler("only"), progressTimeout
	ids := b.insert(t, 1)
	start(t, b.cfg)
	waitFor(t, "the record", func() bool { return len(r.snapshot()) >= 1 })
	waitFor(t, "the position past it", func() bool { _, pos := b.position(t, b.cfg.Process); return pos == idText(ids[0]) })
	calls := r.snapshot()
	require.Len(t, calls, 1, "delivered once")
	require.NoError(t, calls[0].err)
	require.Equal(t, 1, calls[0].attempt)
	require.GreaterOrEqual(t, calls[0].ended.Sub(calls[0].began), 1500*time.Millisecond)
	require.Empty(t, haltedOn(t, b))
}

// TestAHandlerThatFallsSilentIsCutOffATimeoutAfterItsLastReport: a handler that reports progress for
// 600ms, twice its timeout, and then nothing, is cut off a timeout after its last report, with an error
// that says so; its retry goes through.
func TestAHandlerThatFallsSilentIsCutOffATimeoutAfterItsLastReport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := &reporter{t: t, b: b, haltedError: make(chan string, 1), reportFor: func(attempt int) (time.Duration, bool) {
		if attempt == 1 {
			return 600 * time.Millisecond, false
		}
		return 0, true
	}}
	b.cfg.Handler, b.cfg.HandlerTimeout = r.handler("only"), progressTimeout
	ids := b.insert(t, 1)
	start(t, b.cfg)
	waitFor(t, "the record, at its retry", func() bool { return len(r.snapshot()) >= 2 })
	calls := r.snapshot()
	require.Len(t, calls, 2)
	cut := calls[0]
	require.ErrorIs(t, cut.err, context.Canceled)
	require.False(t, cut.reported.IsZero())
	silence := cut.ended.Sub(cut.reported)
	t.Logf("reported for %s, cut off %s after the last report", cut.reported.Sub(cut.began).Round(time.Millisecond),
		silence.Round(time.Millisecond))
	require.GreaterOrEqual(t, cut.reported.Sub(cut.began), 500*time.Millisecond, "reported past the timeout")
	require.GreaterOrEqual(t, silence, progressTimeout, "cut off before a timeout of silence")
	require.Less(t, silence, progressTimeout+time.Second, "not cut off within a timeout of silence, and a margin")
	require.Contains(t, <-r.haltedError, "(handler reported no progress for 300ms (it ran ")
	require.NoError(t, calls[1].err)
	waitFor(t, "the position past it", func() bool { _, pos := b.position(t, b.cfg.Process); return pos == idText(ids[0]) })
}

// TestALeaseBoundsAHandlerReportingProgress: a handler that reports progress forever is cut off before the
// lease it started under runs out (the shortest lease its 300ms timeout allows with a margin to spare, 1s),
// with an error that names the lease; and with a standby beside the owner, no call of one instance
// overlaps a call of the other.
func TestALeaseBoundsAHandlerReportingProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := &reporter{t: t, b: b, reportFor: func(int) (time.Duration, bool) { return -1, false }}
	b.cfg.HandlerTimeout, b.cfg.Lease = progressTimeout, time.Second
	first, second := b.cfg, b.cfg
	first.ClientConfig.Instance, first.Handler = "first", r.handler("first")
	second.ClientConfig.Instance, second.Handler = "second", r.handler("second")
	ids := b.insert(t, 1)
	start(t, first)
	waitFor(t, "the first instance to own the process", func() bool { return owner(t, b) == "first" })
	start(t, second)
	waitFor(t, "three attempts cut off", func() bool { return len(r.snapshot()) >= 3 })

	var halted string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT halted_error FROM inorder.cursor WHERE process_name = $1", b.cfg.Process).Scan(&halted))
	require.Contains(t, halted, "cut off where the lease (1s) stops covering the call")
	require.Equal(t, idText(ids[0]), haltedOn(t, b))

	calls := r.snapshot()
	for i, c := range calls {
		ran := c.ended.Sub(c.began)
		t.Logf("%s, attempt %d: ran %s, ended %s before the lease it began under", c.instance, c.attempt,
			ran.Round(time.Millisecond), c.leaseExpires.Sub(c.ended).Round(time.Millisecond))
		require.ErrorIs(t, c.err, context.Canceled)
		require.Greater(t, ran, progressTimeout+100*time.Millisecond, "progress extended the call past its timeout")
		require.True(t, c.ended.Before(c.leaseExpires), "a call outlived the lease it began under")
		if i > 0 {
			require.True(t, calls[i-1].ended.Before(c.began), "two calls in flight at once, by %s and %s",
				calls[i-1].instance, c.instance)
		}
	}
}
