// Package billingtest is a third-party billing API for tests: a real HTTP server that takes usage events
// the way payment processors' APIs do, with a bearer token, an idempotency key and a JSON body of its own,
// and keeps what it accepted, so that a test can check that a sink delivered every record, once, in order
// per customer.
package billingtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Usage is the body the API takes: its own format, nothing of inorder's.
type Usage struct {
	Customer string `json:"customer"`
	Quantity int64  `json:"quantity"`
	EventID  string `json:"event_id"`
}

// Config configures an API.
type Config struct {
	// APIKey is the key the API demands as "Authorization: Bearer <key>". Required.
	APIKey string
	// IdempotencyHeader is the header the API demands the idempotency key in. Empty means
	// "Idempotency-Key".
	IdempotencyHeader string
	// MaxLatency bounds the random time the API takes to answer, so that requests overlap. Zero means it
	// answers at once.
	MaxLatency time.Duration
}

// Accepted is one usage event the API accepted, with the idempotency key it came with.
type Accepted struct {
	Usage
	IdempotencyKey string
}

// API is a running fake billing API. Its answers:
//
//   - 401 {"error":{"message":"Invalid API Key provided: <what was presented>"}} without the right
//     bearer token (it echoes the key it refused, as some real APIs do in part);
//   - 400 without an idempotency key, or with a body that is not exactly a Usage with a customer, a
//     positive quantity and an event id, or with another content type than application/json;
//   - 409 for a known idempotency key with another body;
//   - 200 {"id":"<event id>"} otherwise; a known key with the same body is answered again without
//     being counted twice.
//
// It fails the test when two requests of one customer are in flight at once.
type API struct {
	// URL is the API's base URL; usage events go to URL + "/v1/usage".
	URL string

	t   testing.TB
	cfg Config

	mu        sync.Mutex
	accepted  []Accepted
	byKey     map[string][]byte // idempotency key -> body
	requests  int
	replays   int
	refused   map[int]int // status -> count
	inFlight  map[string]int
	all, most int
}

// Start starts an API that stops when the test ends.
func Start(t testing.TB, cfg Config) *API {
	t.Helper()
	if cfg.APIKey == "" {
		t.Fatal("billingtest: Config.APIKey is required")
	}
	if cfg.IdempotencyHeader == "" {
		cfg.IdempotencyHeader = "Idempotency-Key"
	}
	a := &API{t: t, cfg: cfg, byKey: map[string][]byte{}, refused: map[int]int{}, inFlight: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/usage", a.usage)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

func (a *API) refuse(w http.ResponseWriter, code int, msg string) {
	a.mu.Lock()
	a.refused[code]++
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg}})
	_, _ = w.Write(b)
}

func (a *API) usage(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests++
	a.mu.Unlock()
	if got := r.Header.Get("Authorization"); got != "Bearer "+a.cfg.APIKey {
		a.refuse(w, http.StatusUnauthorized, "Invalid API Key provided: "+got)
		return
	}
	key := r.Header.Get(a.cfg.IdempotencyHeader)
	if key == "" {
		a.refuse(w, http.StatusBadRequest, "missing "+a.cfg.IdempotencyHeader+" header")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		a.refuse(w, http.StatusBadRequest, "content type "+ct+" is not application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		a.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	var u Usage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil || dec.More() {
		a.refuse(w, http.StatusBadRequest, fmt.Sprintf("body is not a usage event: %v", err))
		return
	}
	if u.Customer == "" || u.Quantity <= 0 || u.EventID == "" {
		a.refuse(w, http.StatusBadRequest, "a usage event needs a customer, a positive quantity and an event_id")
		return
	}

	a.mu.Lock()
	if prev, ok := a.byKey[key]; ok {
		a.mu.Unlock()
		if !bytes.Equal(prev, body) {
			a.refuse(w, http.StatusConflict, "idempotency key "+key+" was used with another body")
			return
		}
		a.mu.Lock()
		a.replays++
		a.mu.Unlock()
		a.ok(w, u)
		return
	}
	if a.inFlight[u.Customer]++; a.inFlight[u.Customer] > 1 {
		a.t.Errorf("billingtest: two events of customer %s in flight at once", u.Customer)
	}
	a.all++
	a.most = max(a.most, a.all)
	a.mu.Unlock()

	if a.cfg.MaxLatency > 0 {
		time.Sleep(rand.N(a.cfg.MaxLatency)) // the API's own latency
	}

	a.mu.Lock()
	a.inFlight[u.Customer]--
	a.all--
	if _, ok := a.byKey[key]; !ok { // a concurrent request of the same key may have been first
		a.byKey[key] = body
		a.accepted = append(a.accepted, Accepted{Usage: u, IdempotencyKey: key})
	}
	a.mu.Unlock()
	a.ok(w, u)
}

func (a *API) ok(w http.ResponseWriter, u Usage) {
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]string{"id": u.EventID})
	_, _ = w.Write(b)
}

// Accepted returns the events accepted, each idempotency key once, in the order the API accepted them.
func (a *API) Accepted() []Accepted {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Accepted(nil), a.accepted...)
}

// Stats returns how many requests the API got, how many repeated a known key, and the most it had in
// flight at once.
func (a *API) Stats() (requests, replays, mostInFlight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests, a.replays, a.most
}

// Refused returns how many requests the API refused with code.
func (a *API) Refused(code int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused[code]
}

// OrderPerCustomer returns an error unless each customer's events were accepted in increasing quantity,
// the order a test that numbers its events by quantity inserted them in.
func (a *API) OrderPerCustomer() error {
	last := map[string]int64{}
	for _, e := range a.Accepted() {
		if e.Quantity <= last[e.Customer] {
			return fmt.Errorf("customer %s: event %s (quantity %d) accepted after quantity %d",
				e.Customer, e.EventID, e.Quantity, last[e.Customer])
		}
		last[e.Customer] = e.Quantity
	}
	return nil
}
