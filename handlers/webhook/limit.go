package webhook

import (
	"context"
	"sync"
	"time"
)

// gate paces the requests of one handler, whatever the number in flight: at most rate a second (zero:
// no bound), spaced evenly, and none while the sink asked every request to wait (a Retry-After on a 429
// or a 503 pauses them all, not only the one that got it).
type gate struct {
	mu       sync.Mutex
	interval time.Duration // between two requests; zero for no bound
	next     time.Time     // the earliest the next request may go
	paused   time.Time     // no request goes before this
}

func newGate(rate float64) *gate {
	g := &gate{}
	if rate > 0 {
		g.interval = time.Duration(float64(time.Second) / rate)
	}
	return g
}

// wait blocks until a request may go, or ctx is done.
func (g *gate) wait(ctx context.Context) error {
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
	g.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// pause holds every request until d from now.
func (g *gate) pause(d time.Duration) {
	g.mu.Lock()
	if until := time.Now().Add(d); until.After(g.paused) {
		g.paused = until
	}
	g.mu.Unlock()
}
