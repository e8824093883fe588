package webhook_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

// arrivals is a receiver that notes when each request arrived, answering what answer says.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) note() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	a.at = append(a.at, now)
	return now
}

func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// MaxRate spaces the requests of every caller at once: 21 sent together at 40 a second span half a
// second from the first to the last as sent; arrivals may bunch by what dialling each connection took,
// so the test asks for 300 ms of the 500. Unbounded, they arrive within a few milliseconds.
func TestMaxRateIsSharedByEveryRequestInFlight(t *testing.T) {
	t.Parallel()
	var a arrivals
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { a.note() })
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.MaxRate = 40 })
	const n = 21
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- h.Handle(context.Background(), record(strconv.Itoa(i+1), 1)) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	at := a.times()
	require.Len(t, at, n)
	first, last := at[0], at[0]
	for _, x := range at {
		first, last = minTime(first, x), maxTime(last, x)
	}
	require.GreaterOrEqual(t, last.Sub(first), 300*time.Millisecond, "never faster than the rate, whatever the number in flight")

	_, err := webhook.New[handlers.Row](webhook.Config{URL: rc.srv.URL, Secret: secret, MaxRate: -1})
	require.ErrorContains(t, err, "Config.MaxRate -1 is negative")
}

// A 429 with Retry-After holds every request to the sink, not only the refused one: a request sent
// right after the refusal arrives no earlier than the sink asked.
func TestRetryAfterPausesEveryRequest(t *testing.T) {
	t.Parallel()
	var a arrivals
	refusedAt := make(chan time.Time, 1)
	var once sync.Once
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
		now := a.note()
		once.Do(func() { // the first request only
			refusedAt <- now
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		})
	})
	h := newHandler(t, rc.srv.URL, nil)
	err := h.Handle(context.Background(), record("1", 1))
	u, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "a rate limit is the sink's, not the record's: %v", err)
	require.Contains(t, u.Check, "rate limit")
	after, ok := handlers.RetryAfterOf(err)
	require.True(t, ok)
	require.Equal(t, time.Second, after)
	refused := <-refusedAt

	require.NoError(t, h.Handle(context.Background(), record("2", 1)), "another record, another key")
	at := a.times()
	require.Len(t, at, 2)
	require.GreaterOrEqual(t, at[1].Sub(refused), 900*time.Millisecond, "held until the sink's Retry-After")
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
