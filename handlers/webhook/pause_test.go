package webhook_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
)

// pauseSink is a receiver that answers each request as answer says for its number (1 for the first to
// arrive), and keeps every request: when it arrived, for which record and key, and what it answered.
type pauseSink struct {
	srv    *httptest.Server
	answer func(n int, w http.ResponseWriter) int

	mu   sync.Mutex
	reqs []pauseReq
}

type pauseReq struct {
	at      time.Time
	id, key string
	status  int
}

func newPauseSink(t *testing.T, answer func(n int, w http.ResponseWriter) int) *pauseSink {
	s := &pauseSink{answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var body struct{ ID, Key string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("sink: %v", err)
			w.WriteHeader(http.StatusUnsupportedMediaType)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		code := s.answer(len(s.reqs)+1, w)
		s.reqs = append(s.reqs, pauseReq{at: at, id: body.ID, key: body.Key, status: code})
		w.WriteHeader(code)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *pauseSink) requests() []pauseReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pauseReq(nil), s.reqs...)
}

// acceptedCount is how many records were accepted at least once.
func (s *pauseSink) acceptedCount() int {
	seen := map[string]bool{}
	for _, r := range s.requests() {
		if r.status == http.StatusOK {
			seen[r.id] = true
		}
	}
	return len(seen)
}

// requireNothingAcceptedResent requires that no record was sent again once the sink had accepted it,
// and that each key's records were accepted in id order.
func requireNothingAcceptedResent(t *testing.T, reqs []pauseReq) {
	t.Helper()
	accepted := map[string]bool{}
	var resent []string
	last := map[string]int64{}
	for _, r := range reqs {
		if accepted[r.id] {
			resent = append(resent, r.id)
			continue
		}
		if r.status != http.StatusOK {
			continue
		}
		accepted[r.id] = true
		id, err := strconv.ParseInt(r.id, 10, 64)
		require.NoError(t, err)
		require.Greater(t, id, last[r.key], "key %s: record %d accepted after %d", r.key, id, last[r.key])
		last[r.key] = id
	}
	require.Empty(t, resent, "records sent again after the sink had accepted them")
}

// TestARateLimitStopsEveryRequestAndResendsNothing is a payment API's rate limit met by a window: 300
// records of 20 keys, 16 in flight, at most 50 requests a second, and the receiver answers the 100th
// request 429 with Retry-After: 2. From 50 ms after the 429 until its Retry-After ends no request
// arrives (those waiting for their turn at the rate limiter do not go), no second holds more than 10 %
// over the rate, and no record the receiver accepted is sent again.
func TestARateLimitStopsEveryRequestAndResendsNothing(t *testing.T) {
	t.Parallel()
	const rate, retryAfter = 50, 2 * time.Second
	b := setupWindow(t, 16, 0)
	sink := newPauseSink(t, func(n int, w http.ResponseWriter) int {
		if n == 100 {
			w.Header().Set("Retry-After", "2")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	h, err := webhook.New[handlers.Row](webhook.Config{URL: sink.srv.URL, Secret: secret, MaxRate: rate})
	require.NoError(t, err)
	b.cfg.Handler = h
	ids := b.insert(t, customers(300, 20)...)
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	eventually(t, "every record", func() bool { return sink.acceptedCount() == len(ids) })

	reqs := sink.requests()
	refused := reqs[99]
	require.Equal(t, http.StatusTooManyRequests, refused.status)
	var during []string
	for _, r := range reqs {
		if r.at.After(refused.at.Add(50*time.Millisecond)) && r.at.Before(refused.at.Add(retryAfter)) {
			during = append(during, r.id)
		}
	}
	require.Empty(t, during, "requests that arrived after the 429 and before its Retry-After ended")
	for i, r := range reqs {
		n := 0
		for _, o := range reqs[i:] {
			if o.at.Sub(r.at) < time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, rate*11/10, "requests in the second from request %d", i+1)
	}
	requireNothingAcceptedResent(t, reqs)
	t.Logf("%d requests for %d records", len(reqs), len(ids))
}

// TestAnOutageResendsNothingAccepted: the receiver answers 20 requests in a row 503 in the middle of a
// stream of 300 records of 20 keys with 16 in flight. Every record arrives, in order per key, and none
// the receiver accepted is sent again after the outage.
func TestAnOutageResendsNothingAccepted(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 16, 0)
	sink := newPauseSink(t, func(n int, _ http.ResponseWriter) int {
		if n >= 100 && n < 120 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h, err := webhook.New[handlers.Row](webhook.Config{URL: sink.srv.URL, Secret: secret})
	require.NoError(t, err)
	b.cfg.Handler = h
	ids := b.insert(t, customers(300, 20)...)
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	eventually(t, "every record", func() bool { return sink.acceptedCount() == len(ids) })
	reqs := sink.requests()
	requireNothingAcceptedResent(t, reqs)
	t.Logf("%d requests for %d records", len(reqs), len(ids))
}
