package processor

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// handlerDeadline bounds one handler call at a time with a single reusable timer. A context.WithTimeout
// per record costs a new runtime timer each time, which for a fast handler is a quarter of the work of a
// record; this arms the same timer again instead.
type handlerDeadline struct {
	timeout time.Duration

	mu       sync.Mutex
	timer    *time.Timer
	cancel   context.CancelCauseFunc
	deadline time.Time
}

// errHandlerTimeout is the cause of a handler context cut off by the timeout.
type errHandlerTimeout struct{ d time.Duration }

func (e errHandlerTimeout) Error() string {
	return fmt.Sprintf("handler did not finish within %s", e.d)
}
func (e errHandlerTimeout) Unwrap() error { return context.DeadlineExceeded }

// start returns a context for one handler call, cancelled after the timeout, and the function that ends
// the call. Calls must not overlap.
func (h *handlerDeadline) start(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	h.mu.Lock()
	h.cancel, h.deadline = cancel, time.Now().Add(h.timeout)
	if h.timer == nil {
		h.timer = time.AfterFunc(h.timeout, h.fire)
	} else {
		h.timer.Reset(h.timeout)
	}
	h.mu.Unlock()
	return ctx, func() {
		h.mu.Lock()
		h.timer.Stop()
		h.cancel = nil
		h.mu.Unlock()
		cancel(nil)
	}
}

// fire cancels the call in flight if its deadline has passed: a timer that fired late for an earlier
// call finds a later deadline, or no call, and does nothing.
func (h *handlerDeadline) fire() {
	h.mu.Lock()
	cancel, due := h.cancel, h.deadline
	h.mu.Unlock()
	if cancel != nil && !time.Now().Before(due) {
		cancel(errHandlerTimeout{h.timeout})
	}
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
