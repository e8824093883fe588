package webhook_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

// noting is the real transport, noting when each request is handed to it.
type noting struct {
	next http.RoundTripper
	at   *arrivals
}

func (n noting) RoundTrip(r *http.Request) (*http.Response, error) {
	n.at.note()
	return n.next.RoundTrip(r)
}

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

// MaxRate spaces the requests of every caller at once: 21 handed to the handler together at 40 a second
// go to the transport no sooner than 25 ms apart, the k-th of them (in time) at least k × 25 ms after the
// callers began. The times are taken where the request leaves the handler for the real transport, not
// where it arrives: what the receiver sees also holds what dialling each connection took, which bunches
// arrivals on a loaded machine without saying anything of the rate. Unbounded, they all go at once.
func TestMaxRateIsSharedByEveryRequestInFlight(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(http.ResponseWriter, *http.Request) {})
	var sent arrivals
	client := &http.Client{Transport: noting{http.DefaultTransport.(*http.Transport).Clone(), &sent}}
	const rate, n = 40, 21
	interval := time.Second / rate
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.MaxRate, c.Client = rate, client })
	errs := make(chan error, n)
	began := time.Now()
	for i := range n {
		go func() { errs <- h.Handle(context.Background(), record(strconv.Itoa(i+1), 1)) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	at := sent.times()
	require.Len(t, at, n)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for k, x := range at {
		require.GreaterOrEqual(t, x.Sub(began), time.Duration(k)*interval,
			"request %d of %d went to the transport %s after the callers began: faster than %d a second", k+1, n, x.Sub(began), rate)
	}

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
