package fault

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/handlers/webhook"
)

// secretEnv names the environment variable that gives children the webhook secret.
const secretEnv = "INORDER_FAULT_WEBHOOK_SECRET"

var secret = []byte("fault-suite-secret")

// maxBody bounds a request's body: the big_rows scenario's records carry documents of up to 1 MiB.
const maxBody = 4 << 20

// delivery is one request the receiver got, in arrival order.
type delivery struct {
	Process  string
	ID       int64
	Agg      string
	Seq      int
	Attempt  int
	Instance string    // the instance that sent it, from the path it posted to (see urlFor)
	At       time.Time // when it arrived
}

// gate holds the next request of a process open until release is closed.
type gate struct {
	process string
	started chan delivery
	release chan struct{}
	once    sync.Once
}

// open lets the held request answer 200.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// sink is the webhook receiver: it verifies each request, records it (at arrival, before answering: what
// the receiver acted on) and answers 200; or, for a key a scenario has it refuse, answers 400 and records
// the request as refused, not delivered.
type sink struct {
	srv     *httptest.Server
	closing chan struct{}

	mu       sync.Mutex
	log      []delivery
	gates    []*gate
	seen     map[string]int           // process -> requests received
	dropAt   map[string]int           // process -> number of the request to take but not record (to prove the checks)
	delay    map[string]time.Duration // process -> how long the receiver takes to answer (default up to 2ms)
	refuse   map[string]string        // process -> a key whose records the receiver refuses (400), as a closed account
	refusals []delivery               // the requests refused, in arrival order; not deliveries
	bad      []string                 // requests that were not what the webhook handler promises
}

func newSink(t *testing.T) *sink {
	s := &sink{closing: make(chan struct{}), seen: map[string]int{}, dropAt: map[string]int{},
		delay: map[string]time.Duration{}, refuse: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		close(s.closing)
		s.srv.Close()
	})
	return s
}

func (s *sink) url() string { return s.srv.URL + "/hook" }

// urlFor is the URL an instance posts to: the receiver's, with the instance's name in the path, so that
// each delivery names the instance that made it.
func (s *sink) urlFor(instance string) string { return s.url() + "/" + url.PathEscape(instance) }

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := webhook.VerifyRequest(secret, r, time.Minute); err != nil {
		s.reject(w, "signature: %v", err)
		return
	}
	var env struct {
		Process string `json:"process"`
		ID      string `json:"id"`
		Key     string `json:"key"`
		Attempt int    `json:"attempt"`
		Record  struct {
			ID          int64  `json:"id"`
			AggregateID string `json:"aggregate_id"`
			Seq         int    `json:"seq"`
		} `json:"record"`
	}
	if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
		s.reject(w, "body: %v", err)
		return
	}
	if key := r.Header.Get(webhook.IdempotencyKeyHeader); key != env.Process+":"+env.ID {
		s.reject(w, "Idempotency-Key %q for process %q record %q", key, env.Process, env.ID)
		return
	}
	if env.ID != strconv.FormatInt(env.Record.ID, 10) || env.Key != env.Record.AggregateID {
		s.reject(w, "envelope id %q key %q do not match the record %+v", env.ID, env.Key, env.Record)
		return
	}
	instance, _ := strings.CutPrefix(r.URL.Path, "/hook/")
	d := delivery{Process: env.Process, ID: env.Record.ID, Agg: env.Record.AggregateID, Seq: env.Record.Seq,
		Attempt: env.Attempt, Instance: instance, At: time.Now()}

	s.mu.Lock()
	s.seen[d.Process]++
	if key, ok := s.refuse[d.Process]; ok && key == d.Agg {
		// A permanent refusal, which the webhook handler reports as such: the stream halts on the record, or
		// parks its key. The record was not delivered.
		s.refusals = append(s.refusals, d)
		s.mu.Unlock()
		http.Error(w, "account closed", http.StatusBadRequest)
		return
	}
	if s.dropAt[d.Process] != s.seen[d.Process] {
		s.log = append(s.log, d)
	}
	delay, slow := s.delay[d.Process]
	var g *gate
	for i, gg := range s.gates {
		if gg.process == d.Process {
			g = gg
			s.gates = append(s.gates[:i:i], s.gates[i+1:]...)
			break
		}
	}
	s.mu.Unlock()

	if g != nil {
		g.started <- d
		select {
		case <-g.release:
		case <-r.Context().Done():
		case <-s.closing:
		}
	}
	// A receiver takes a moment to act: it widens the window in which a fault finds a request in flight.
	if !slow {
		delay = time.Duration(rand.IntN(2000)) * time.Microsecond
	}
	time.Sleep(delay)
	w.WriteHeader(http.StatusOK)
}

func (s *sink) reject(w http.ResponseWriter, format string, args ...any) {
	s.mu.Lock()
	s.bad = append(s.bad, fmt.Sprintf(format, args...))
	s.mu.Unlock()
	http.Error(w, "bad request", http.StatusBadRequest)
}

// hold arms a gate on the next request of process.
func (s *sink) hold(process string) *gate {
	g := &gate{process: process, started: make(chan delivery, 1), release: make(chan struct{})}
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	return g
}

// drop makes the receiver take the nth request of process (1-based) without recording it.
func (s *sink) drop(process string, n int) {
	s.mu.Lock()
	s.dropAt[process] = n
	s.mu.Unlock()
}

// slow makes the receiver take d to answer each request of process, from the next one on; zero goes back
// to the default of up to 2ms.
func (s *sink) slow(process string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == 0 {
		delete(s.delay, process)
		return
	}
	s.delay[process] = d
}

// refuseKey makes the receiver refuse (400, permanently) every request of process for a record of key,
// from the next one on, until acceptKey.
func (s *sink) refuseKey(process, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse[process] = key
}

// acceptKey makes the receiver accept every record of process again.
func (s *sink) acceptKey(process string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refuse, process)
}

// refused returns the requests of process the receiver refused, in arrival order.
func (s *sink) refused(process string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.refusals {
		if d.Process == process {
			out = append(out, d)
		}
	}
	return out
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

func (s *sink) count(process string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[process]
}

func (s *sink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.log...)
}

// since returns the deliveries recorded from index i on.
func (s *sink) since(i int) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.log) {
		return nil
	}
	return append([]delivery(nil), s.log[i:]...)
}

func (s *sink) rejected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}
