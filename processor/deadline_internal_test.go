package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
)

// TestCallDue is the arithmetic of a handler call's deadline: the timeout counts from the start or the
// last report of progress, whichever is later, and the limit holds however much progress comes.
func TestCallDue(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name         string
		moved, limit time.Time
		due          time.Time
		limited      bool
	}{
		{"no progress: the timeout from the start", time.Time{}, at(1000), at(300), false},
		{"progress before the timeout extends it", at(200), at(1000), at(500), false},
		{"progress again extends it again", at(450), at(1000), at(750), false},
		{"progress just at the start adds nothing", at(0), at(1000), at(300), false},
		{"a report from before the start adds nothing", t0.Add(-time.Second), at(1000), at(300), false},
		{"the limit holds against progress", at(800), at(1000), at(1000), true},
		{"the limit holds however much progress", at(999), at(1000), at(1000), true},
		{"the limit holds against progress past it", at(5000), at(1000), at(1000), true},
		{"ending at the limit exactly is no cut by it", at(700), at(1000), at(1000), false},
		{"no limit known: the timeout and no more", at(200), time.Time{}, at(300), true},
		{"no limit known, no progress: the timeout", time.Time{}, time.Time{}, at(300), false},
		{"a limit before the timeout takes nothing from it", time.Time{}, at(100), at(300), false},
		{"a limit before the timeout gives progress nothing", at(250), at(100), at(300), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			due, limited := callDue(t0, tc.moved, tc.limit, timeout)
			require.Equal(t, tc.due, due)
			require.Equal(t, tc.limited, limited)
		})
	}
}

// TestLimitUnder is where a call's limit lies: short of the lease's end by the lease's margin, or short of
// the idle-in-transaction timeout counted from the lease's last renewal when that comes first.
func TestLimitUnder(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		until       time.Time
		lease, idle time.Duration
		want        callLimit
	}{
		{"the defaults: the lease, less a second", until, 30 * time.Second, time.Minute,
			callLimit{at: until.Add(-time.Second), kind: limitLease, setting: 30 * time.Second}},
		{"a short lease: less a tenth of it", until, time.Second, time.Minute,
			callLimit{at: until.Add(-100 * time.Millisecond), kind: limitLease, setting: time.Second}},
		{"a lease longer than the idle timeout: the idle timeout from the renewal", until, 5 * time.Minute, time.Minute,
			callLimit{at: until.Add(-4*time.Minute - time.Second), kind: limitIdle, setting: time.Minute}},
		{"no lease: no limit", time.Time{}, 30 * time.Second, time.Minute, callLimit{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, limitUnder(tc.until, tc.lease, tc.idle))
		})
	}
}

// ownKey is the key of a value a handler puts in its own context.
type ownKey struct{}

// cutAfter runs one call of h that may run until limit after its start (zero: no limit known), reporting
// progress through handlers.Progress every 10ms for report (forever when negative), and returns how long
// the call ran and why it was cut off.
func cutAfter(t *testing.T, h *handlerDeadline, limit time.Duration, report time.Duration) (time.Duration, errHandlerTimeout) {
	t.Helper()
	began := time.Now()
	var l callLimit
	if limit > 0 {
		l = callLimit{at: began.Add(limit), kind: limitLease, setting: time.Second}
	}
	// The parent's deadline only keeps a deadline that never cuts the call off from hanging the test.
	parent, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	call := h.start(parent, l)
	defer call.end()
	ctx := context.WithValue(call, ownKey{}, "a handler's own context, derived from the call's")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			var cause errHandlerTimeout
			require.True(t, errors.As(context.Cause(ctx), &cause), "%v", context.Cause(ctx))
			require.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
			return time.Since(began), cause
		case <-tick.C:
			if report < 0 || time.Since(began) < report {
				handlers.Progress(ctx)
			}
		}
	}
}

func TestTheHandlerDeadlineMovesOnProgress(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	h := &handlerDeadline{timeout: timeout}

	ran, cause := cutAfter(t, h, time.Second, 0)
	require.GreaterOrEqual(t, ran, timeout)
	require.Less(t, ran, 3*timeout, "silent from the start: cut off at the timeout")
	require.Equal(t, "handler did not finish within 100ms", cause.Error())

	ran, cause = cutAfter(t, h, time.Second, 300*time.Millisecond)
	require.GreaterOrEqual(t, ran, 300*time.Millisecond+timeout-10*time.Millisecond, "progress moved the deadline")
	require.Less(t, ran, 300*time.Millisecond+3*timeout, "silent after its progress: cut off a timeout later")
	require.True(t, cause.moved)
	require.Equal(t, limitNone, cause.limit)
	require.Contains(t, cause.Error(), "handler reported no progress for 100ms (it ran ")

	ran, cause = cutAfter(t, h, 400*time.Millisecond, -1)
	require.GreaterOrEqual(t, ran, 400*time.Millisecond)
	require.Less(t, ran, 400*time.Millisecond+2*timeout, "reporting progress forever: cut off at the limit")
	require.Equal(t, limitLease, cause.limit)
	require.Contains(t, cause.Error(), "cut off where the lease (1s) stops covering the call")

	ran, cause = cutAfter(t, &handlerDeadline{timeout: timeout}, 0, -1)
	require.Less(t, ran, 3*timeout, "no limit known: the timeout and no more, whatever the progress")
	require.Equal(t, limitNone, cause.limit)
	require.Contains(t, cause.Error(), "cut off at the timeout (100ms): no lease was known to cover it for longer")
}

// TestProgressReachesOnlyTheCallInFlight: a report through the context of a call that has ended (a sink's
// goroutine that outlived it) does not move the deadline of the call after it, and a context that carries
// no call takes a report without effect.
func TestProgressReachesOnlyTheCallInFlight(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	h := &handlerDeadline{timeout: timeout}
	first := h.start(context.Background(), callLimit{at: time.Now().Add(time.Second), kind: limitLease})
	first.end()
	require.Error(t, first.Err())

	// The parent's deadline only keeps a deadline that never cuts the call off from hanging the test.
	parent, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	second := h.start(parent, callLimit{at: began.Add(time.Second), kind: limitLease})
	defer second.end()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for second.Err() == nil {
		select {
		case <-second.Done():
		case <-tick.C:
			handlers.Progress(first)
			handlers.Progress(context.Background())
		}
	}
	require.Less(t, time.Since(began), 3*timeout, "the first call's reports moved the second's deadline")
	var cause errHandlerTimeout
	require.ErrorAs(t, context.Cause(second), &cause)
	require.False(t, cause.moved)
}

// TestATimerArmedForAnEarlierCallCutsTheNextOffAtItsOwnTimeout: calls shorter than the timeout leave the one
// timer armed for the first of them; when it fires it finds a later call, due later, and waits for that
// one's timeout, neither cutting it off early nor forgetting it.
func TestATimerArmedForAnEarlierCallCutsTheNextOffAtItsOwnTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	h := &handlerDeadline{timeout: timeout}
	first := h.start(context.Background(), callLimit{})
	first.end()
	require.ErrorIs(t, first.Err(), context.Canceled, "an ended call's context is cancelled")
	require.Equal(t, context.Canceled, context.Cause(first), "an ended call has no timeout as its cause")

	time.Sleep(timeout / 2) // the next call begins half a timeout after the timer was armed
	began := time.Now()
	second := h.start(context.Background(), callLimit{})
	defer second.end()
	<-second.Done()
	ran := time.Since(began)
	require.GreaterOrEqual(t, ran, timeout, "cut off before its own timeout, when the timer armed for the first call fired")
	require.Less(t, ran, 2*timeout)
	var cause errHandlerTimeout
	require.ErrorAs(t, context.Cause(second), &cause)
	require.Equal(t, "handler did not finish within 200ms", cause.Error())
}
