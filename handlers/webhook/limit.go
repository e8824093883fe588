package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/handlers"
)

// gate paces the requests of one handler, whatever the number in flight: at most rate a second (zero:
// no bound), spaced evenly, and none while the sink asked every request to wait (a Retry-After on a 429
// or a 503 pauses them all, not only the one that got it).
//
// Stop means stop: when the sink refuses a request in a way that says it pauses (its outage, a 429, a
// 503, a Retry-After), no request waiting for its turn goes any more. Each of them fails unsent with an
// error that says so, which the processor takes as the sink's, not the record's; only the requests already
// on the wire finish.
type gate struct {
	mu       sync.Mutex
	interval time.Duration // between two requests; zero for no bound
	next     time.Time     // the earliest the next request may go
	paused   time.Time     // no request goes before this
	// stops counts the sink's refusals that stop the requests waiting for their turn, and stopped is the
	// last of them.
	stops   uint64
	stopped error
}

func newGate(rate float64) *gate {
	g := &gate{}
	if rate > 0 {
		g.interval = time.Duration(float64(time.Second) / rate)
	}
	return g
}

// wait blocks until a request may go, or ctx is done. A request that had to wait for its turn does not
// go when the sink refused another one meanwhile (see stop): wait returns the refusal, marked as the
// sink's, and the request must not be sent. target names the sink in that error.
func (g *gate) wait(ctx context.Context, target string) error {
	g.mu.Lock()
	now := time.Now()
	at := now
	if g.paused.After(at) {
		at = g.paused
	}
	if g.interval > 0 {
		if g.next.After(at) {
			at = g.next
		}
		g.next = at.Add(g.interval)
	}
	stops := g.stops
	g.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stops == stops {
		return nil
	}
	return notSent(target, g.stopped, g.paused)
}

// pause holds every request until d from now.
func (g *gate) pause(d time.Duration) {
	g.mu.Lock()
	if until := time.Now().Add(d); until.After(g.paused) {
		g.paused = until
	}
	g.mu.Unlock()
}

// stop takes in a refusal that says the sink pauses (err, the refusal as Handle returns it): the requests
// waiting for their turn now do not go.
func (g *gate) stop(err error) {
	g.mu.Lock()
	g.stops++
	g.stopped = err
	g.mu.Unlock()
}

// notSent is the failure of a request that waited for its turn while the sink refused another one in a
// way that says it pauses (cause): it was not sent. It is the sink's, not the record's (what to check is
// the refusal's), and carries what is left of the sink's Retry-After (until).
func notSent(target string, cause error, until time.Time) error {
	err := fmt.Errorf("webhook POST %s: not sent: the sink refused another request while this one waited for "+
		"its turn (%v)", target, cause)
	if d := time.Until(until); d > 0 {
		err = handlers.RetryAfter(err, d)
	}
	check := "the sink's answers to the requests before this one"
	if u, ok := handlers.UnavailableOf(cause); ok {
		check = u.Check
	}
	return handlers.Unavailable(err, check)
}
