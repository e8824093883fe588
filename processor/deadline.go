package processor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/internal/progress"
)

// handlerDeadline bounds one handler call at a time with a single reusable timer. A context.WithTimeout
// per record costs a new runtime timer each time, which for a fast handler is a quarter of the work of a
// record; this keeps one timer, armed once for many calls: it fires when the first call it was armed for
// is due, finds the call in flight then (a later one, due later, or none) and is armed again for when that
// one is due. A call shorter than the timeout touches no timer at all.
//
// The timeout bounds a silence rather than a length: a call that reports progress (handlers.Progress, a
// webhook whose body is still going out) has its timeout counted again from its last report, up to the
// limit its start was given, the latest time the call may run whatever it reports (see callLimit). A
// report costs a read of the clock and a lock, never the timer: the timer fires when the timeout has
// passed since the start, finds the report, and is armed again for the timeout after it.
type handlerDeadline struct {
	timeout time.Duration

	mu    sync.Mutex
	timer *time.Timer
	// armed says that the timer will fire, and no later than the call in flight is due: it was armed for
	// a call that began no later than this one, or for this one.
	armed bool
	// The call in flight (nil between calls): when it began, when it last reported progress (zero:
	// never), and its limit. They are kept here rather than in the call, which is allocated per call.
	call         *handlerCall
	began, moved time.Time
	limit        callLimit
}

// handlerCall is the context of one handler call: cancelled when the call ends or is cut off, with an
// errHandlerTimeout as its cause when cut off. It answers handlers.Progress for as long as it is the call
// in flight.
//
// The context.WithCancelCause behind it is made only when the handler asks for something that needs it
// (Done, Err, context.Cause, a context of its own derived from it): a handler that only returns, as most
// fast ones do, costs neither that context nor its registration with the parent and removal again, which
// were a tenth of the work of a record.
type handlerCall struct {
	h      *handlerDeadline
	parent context.Context
	began  time.Time // when the call started: one read of the clock for the timeout and the observer

	mu     sync.Mutex
	ctx    context.Context // nil until needed (made)
	cancel context.CancelCauseFunc
	// over says that the call ended, or was cut off with cause, before ctx was made: it is made cancelled.
	over  bool
	cause error
}

// made returns the call's cancellable context, making it on first use.
func (c *handlerCall) made() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancelCause(c.parent)
		if c.over {
			c.cancel(c.cause)
		}
	}
	return c.ctx
}

// stop cancels the call with cause (nil: it ended); the first stop counts.
func (c *handlerCall) stop(cause error) {
	c.mu.Lock()
	if c.ctx == nil {
		if !c.over {
			c.over, c.cause = true, cause
		}
		c.mu.Unlock()
		return
	}
	cancel := c.cancel
	c.mu.Unlock()
	cancel(cause)
}

// Deadline is the parent's: the call's timeout is a cancellation, not a deadline.
func (c *handlerCall) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done is closed when the call ends or is cut off, or its parent is done.
func (c *handlerCall) Done() <-chan struct{} { return c.made().Done() }

// Err says why Done is closed.
func (c *handlerCall) Err() error { return c.made().Err() }

// limitKind says what sets a call's limit, for the error of a call cut off at it.
type limitKind uint8

const (
	limitNone  limitKind = iota // no limit known: the call gets its timeout from the start, and no more
	limitLease                  // the lease stops covering the call
	limitIdle                   // the idle cursor transaction would reach the idle-in-transaction timeout
)

// callLimit is the latest time a handler call may run, however much progress it reports, and what sets it
// there (with the setting, for the error).
type callLimit struct {
	at      time.Time
	kind    limitKind
	setting time.Duration
}

// errHandlerTimeout is the cause of a handler context cut off by the timeout: after a silence of d, or,
// still reporting progress, at its limit. Its text says which, since a call cut off while it still moved
// bytes needs a longer lease, not a faster sink.
type errHandlerTimeout struct {
	d time.Duration
	// ran is how long the call had run when cut off; moved says that it had reported progress.
	ran   time.Duration
	moved bool
	// still says that the call was cut off while still reporting progress: at its limit (limit), or,
	// with no limit known, at the timeout from its start.
	still bool
	// limit is what set the limit the call was cut off at, when still.
	limit   limitKind
	setting time.Duration
}

func (e errHandlerTimeout) Error() string {
	ran := e.ran.Round(time.Millisecond)
	switch {
	case e.still && e.limit == limitLease:
		return fmt.Sprintf("handler still reporting progress after %s, cut off where the lease (%s) stops covering "+
			"the call (a longer --lease lets it run longer)", ran, e.setting)
	case e.still && e.limit == limitIdle:
		return fmt.Sprintf("handler still reporting progress after %s, cut off before the idle-in-transaction "+
			"timeout (%s) would end the cursor session (a longer --idle-timeout lets it run longer)", ran, e.setting)
	case e.still:
		return fmt.Sprintf("handler still reporting progress after %s, cut off at the timeout (%s): no lease was "+
			"known to cover it for longer", ran, e.d)
	case e.moved:
		return fmt.Sprintf("handler reported no progress for %s (it ran %s)", e.d, ran)
	}
	return fmt.Sprintf("handler did not finish within %s", e.d)
}
func (e errHandlerTimeout) Unwrap() error { return context.DeadlineExceeded }

// callDue is when a handler call that began at began, last reported progress at moved (zero: never) and
// may run until limit must end: timeout after its start or its last report, whichever is later, but no
// later than limit. A limit that comes before the timeout counted from the start gives no more than that
// timeout: the limit bounds what progress adds, never what the call had without it. limited says that the
// call ends at its limit, with progress reported that would have taken it further.
func callDue(began, moved, limit time.Time, timeout time.Duration) (due time.Time, limited bool) {
	last := began.Add(timeout)
	if limit.After(last) {
		last = limit
	}
	due = began
	if moved.After(due) {
		due = moved
	}
	due = due.Add(timeout)
	if due.After(last) {
		return last, true
	}
	return due, false
}

// start returns the context of one handler call, cut off once the timeout has passed since its start or
// its last report of progress, and never later than limit (unless limit comes before the timeout from the
// start). The call must be ended (end). Calls must not overlap.
func (h *handlerDeadline) start(parent context.Context, limit callLimit) *handlerCall {
	return h.startAt(parent, limit, time.Now())
}

// startAt is start for a call that begins at now, the clock read by the caller for it.
func (h *handlerDeadline) startAt(parent context.Context, limit callLimit, now time.Time) *handlerCall {
	c := &handlerCall{h: h, parent: parent, began: now}
	h.mu.Lock()
	h.call, h.began, h.moved, h.limit = c, c.began, time.Time{}, limit
	if !h.armed {
		if h.timer == nil {
			h.timer = time.AfterFunc(h.timeout, h.fire)
		} else {
			h.timer.Reset(h.timeout)
		}
		h.armed = true
	}
	h.mu.Unlock()
	return c
}

// end ends the call: its context is cancelled, and it reports progress no more. The timer stays armed,
// for the calls after it.
func (c *handlerCall) end() {
	h := c.h
	h.mu.Lock()
	if h.call == c {
		h.call = nil
	}
	h.mu.Unlock()
	c.stop(nil)
}

// Value answers progress.Key with the call itself, so that handlers.Progress reaches it. Every other key
// is the parent's, except the context package's own (a pointer to an int, which context.Cause and a
// context derived from the call ask for): the call's cancellable context answers it.
func (c *handlerCall) Value(key any) any {
	switch key.(type) {
	case progress.Key:
		return c
	case *int:
		return c.made().Value(key)
	}
	return c.parent.Value(key)
}

// Progress records that the call is still moving bytes (handlers.Progress). A report for a call that has
// ended, from a goroutine of the sink's that outlived it, does nothing.
func (c *handlerCall) Progress() {
	now := time.Now()
	h := c.h
	h.mu.Lock()
	if h.call == c {
		h.moved = now
	}
	h.mu.Unlock()
}

// fire cuts the call in flight off when it is due, and otherwise arms the timer again for when it is: a
// call that reported progress meanwhile is due later, and a timer that fired late for an earlier call
// finds a later call, or none.
func (h *handlerDeadline) fire() {
	h.mu.Lock()
	c := h.call
	if c == nil {
		h.armed = false
		h.mu.Unlock()
		return
	}
	due, limited := callDue(h.began, h.moved, h.limit.at, h.timeout)
	now := time.Now()
	if left := due.Sub(now); left > 0 {
		h.timer.Reset(left)
		h.mu.Unlock()
		return
	}
	cause := errHandlerTimeout{d: h.timeout, ran: now.Sub(h.began), moved: !h.moved.IsZero()}
	if limited {
		cause.still, cause.limit, cause.setting = true, h.limit.kind, h.limit.setting
	}
	h.call, h.armed = nil, false // cut off: it reports progress no more
	h.mu.Unlock()
	c.stop(cause)
}

// callLimit is the latest time a handler call starting now may run, however much progress it reports:
// while the lease covers it, with leaseMargin to spare, as the owner makes sure before it starts a record
// (covered), so that no record is in flight once another instance may have taken the process; and before
// the cursor transaction, which idles while a Handler runs, reaches the idle-in-transaction timeout, which
// would end the session and with it the row lock. The transaction sent nothing before the lease's last
// renewal, so it has idled for no longer than since then. Zero when this instance holds no lease: a call
// then gets its timeout and no more. It reads no clock.
func (e *executor[T]) callLimit() callLimit {
	return limitUnder(e.cur.Lease.LeaseUntil(), e.lease, e.idle)
}

// limitUnder is callLimit for a lease of the given length that runs until until (zero: none), and a
// cursor transaction under the given idle-in-transaction timeout.
func limitUnder(until time.Time, lease, idle time.Duration) callLimit {
	if until.IsZero() {
		return callLimit{}
	}
	limit := callLimit{at: until.Add(-leaseMargin(lease)), kind: limitLease, setting: lease}
	if at := until.Add(idle - lease - leaseMargin(idle)); at.Before(limit.at) {
		limit = callLimit{at: at, kind: limitIdle, setting: idle}
	}
	return limit
}

// explain adds the timeout to a handler error caused by it, since the handler itself usually only says
// "context canceled".
func explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var t errHandlerTimeout
	if cause := context.Cause(ctx); cause != nil && asTimeout(cause, &t) {
		return fmt.Errorf("%w (%s)", err, t.Error())
	}
	return err
}

func asTimeout(err error, t *errHandlerTimeout) bool {
	e, ok := err.(errHandlerTimeout)
	if ok {
		*t = e
	}
	return ok
}
