// Package silence bounds an exchange by a silence rather than a length: a context cut off once a timeout
// has passed with nothing moving, counted from the exchange's start or from the last sign of progress,
// whichever is later. A read of big rows from the database, or a big request body going out to a sink,
// goes on for as long as its bytes keep moving, however slowly, and a path that falls silent is given up a
// timeout after its last byte, as a fixed deadline would give it up a timeout after the start.
//
// The database connections (package dial) and the webhook sink share it: what moves is recorded on a
// Clock, one atomic store of the monotonic clock, and Bound watches a Clock with one timer per exchange,
// armed again when progress came meanwhile. No goroutine waits for it.
package silence

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// epoch is where the clock of progress starts: now counts from it on the monotonic clock, which a change
// of the wall clock does not move.
var epoch = time.Now()

// now is the clock of progress: nanoseconds since epoch, a number one atomic store keeps.
func now() int64 { return int64(time.Since(epoch)) }

// Clock records when something last moved. The zero value has seen nothing move.
type Clock struct {
	last atomic.Int64 // now() at the last Moved; 0 before the first
}

// Moved records that something moved now.
func (c *Clock) Moved() { c.last.Store(now()) }

// Bound returns a context for one exchange watched by c that is cut off once timeout has passed with
// nothing moving on c since the exchange began. Cut off, its Err is context.DeadlineExceeded, as a
// deadline's would be (so that what pgx or net/http report of the exchange is a timeout), and
// context.Cause gives cause. The cancel function ends the exchange and must be called. Contexts derived
// from the one returned see context.Canceled rather than context.DeadlineExceeded when it is cut off;
// pass the one returned to the client.
func Bound(parent context.Context, c *Clock, timeout time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	x := &exchange{Context: ctx, cancel: cancel, clock: c, timeout: int64(timeout), began: now(), cause: cause}
	x.mu.Lock()
	x.timer = time.AfterFunc(timeout, x.check)
	x.mu.Unlock()
	return x, x.stop
}

// exchange is the context Bound returns.
type exchange struct {
	context.Context // cancelled with cause when the exchange is cut off
	cancel          context.CancelCauseFunc
	clock           *Clock
	timeout, began  int64 // nanoseconds, and now()
	cause           error
	cut             atomic.Bool // set before the cancel that cuts the exchange off

	mu    sync.Mutex
	timer *time.Timer
	over  bool // cut off or ended: the timer is not armed again
}

// Err is the error of the context, context.DeadlineExceeded once the exchange was cut off.
func (x *exchange) Err() error {
	err := x.Context.Err()
	if err != nil && x.cut.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// check cuts the exchange off when timeout has passed since it began or since the last progress,
// whichever is later, and otherwise arms the timer again for that moment.
func (x *exchange) check() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.over {
		return
	}
	from := max(x.began, x.clock.last.Load())
	if left := from + x.timeout - now(); left > 0 {
		x.timer.Reset(time.Duration(left))
		return
	}
	x.over = true
	if x.Context.Err() == nil { // the parent's cancellation, when it came first, stays what it is
		x.cut.Store(true)
	}
	x.cancel(x.cause)
}

// stop ends the exchange: the timer is not armed again, and the context is cancelled.
func (x *exchange) stop() {
	x.mu.Lock()
	x.over = true
	x.timer.Stop()
	x.mu.Unlock()
	x.cancel(context.Canceled)
}
