package webhook_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// windowSink is a receiver that answers after a random latency and keeps, for every request, when it
// started and ended in one sequence of events, so that a test can tell what was in flight together.
type windowSink struct {
	t      *testing.T
	srv    *httptest.Server
	refuse func(id string) bool          // answer 400 to this record while it returns true
	gate   func(id string) chan struct{} // when it returns a channel, answer only once it is closed

	mu       sync.Mutex
	seq      int
	reqs     []windowReq
	inFlight map[string]int // per key
	maxAll   int
	all      int
}

type windowReq struct {
	id, key    string
	start, end int
	status     int
}

func newWindowSink(t *testing.T, maxLatency time.Duration) *windowSink {
	s := &windowSink{t: t, inFlight: map[string]int{}, refuse: func(string) bool { return false },
		gate: func(string) chan struct{} { return nil }}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ ID, Key string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("sink: %v", err)
			w.WriteHeader(http.StatusUnsupportedMediaType)
			return
		}
		s.mu.Lock()
		s.seq++
		i := len(s.reqs)
		s.reqs = append(s.reqs, windowReq{id: body.ID, key: body.Key, start: s.seq})
		s.all++
		s.maxAll = max(s.maxAll, s.all)
		if body.Key != "" {
			if s.inFlight[body.Key]++; s.inFlight[body.Key] > 1 {
				t.Errorf("sink: two records of key %s in flight at once", body.Key)
			}
		}
		refuse, gate := s.refuse(body.ID), s.gate(body.ID)
		s.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
			}
		}

		time.Sleep(time.Duration(rand.Int64N(int64(maxLatency) + 1))) // the receiver's own latency
		code := http.StatusOK
		if refuse {
			code = http.StatusBadRequest
		}
		s.mu.Lock()
		s.seq++
		s.reqs[i].end, s.reqs[i].status = s.seq, code
		s.all--
		if body.Key != "" {
			s.inFlight[body.Key]--
		}
		s.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *windowSink) requests() []windowReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]windowReq(nil), s.reqs...)
}

// accepted returns the ids accepted at least once, by their first acceptance, in that order.
func (s *windowSink) accepted() []string {
	seen := map[string]bool{}
	var ids []string
	for _, r := range s.requests() {
		if r.status == http.StatusOK && !seen[r.id] {
			seen[r.id] = true
			ids = append(ids, r.id)
		}
	}
	return ids
}

type windowBench struct {
	db   *pgtest.DB
	sink *windowSink
	cfg  processor.Config[handlers.Row]
}

// setupWindow makes an events table whose key may be NULL and a processor configuration that delivers to
// a webhook with up to inFlight requests at once.
func setupWindow(t *testing.T, inFlight int, maxLatency time.Duration) *windowBench {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE events (
			id bigserial PRIMARY KEY, customer text, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON events (created_at, id)`)
	pgtest.AddClock(t, db, "events")
	sink := newWindowSink(t, maxLatency)
	h, err := webhook.New[handlers.Row](webhook.Config{URL: sink.srv.URL, Secret: secret})
	require.NoError(t, err)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return &windowBench{db: db, sink: sink, cfg: processor.Config[handlers.Row]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "billing", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Handler: h, MaxInFlight: inFlight,
		Source:       inordertype.Source{Table: "events", KeyColumn: "customer"},
		PollInterval: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	}}
}

// insert adds rows for the given customers ("" for no key), in order, and returns their ids.
func (b *windowBench) insert(t *testing.T, customers ...string) []string {
	t.Helper()
	var ids []string
	batch := &pgx.Batch{}
	for _, c := range customers {
		var key any
		if c != "" {
			key = c
		}
		batch.Queue("INSERT INTO events (customer) VALUES ($1) RETURNING id", key).QueryRow(func(row pgx.Row) error {
			var id int64
			err := row.Scan(&id)
			ids = append(ids, strconv.FormatInt(id, 10))
			return err
		})
	}
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
	return ids
}

func newProcessor(t *testing.T, cfg processor.Config[handlers.Row]) *processor.Processor[handlers.Row] {
	t.Helper()
	p, err := processor.New(cfg)
	require.NoError(t, err)
	return p
}

func customers(n, keys int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "c" + strconv.Itoa(rand.IntN(keys))
	}
	return out
}

// checkOrderPerKey requires that the first acceptances of each key's records come in id order.
func checkOrderPerKey(t *testing.T, reqs []windowReq) {
	t.Helper()
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range reqs {
		if r.status != http.StatusOK || seen[r.id] || r.key == "" {
			continue
		}
		seen[r.id] = true
		id, err := strconv.ParseInt(r.id, 10, 64)
		require.NoError(t, err)
		require.Greater(t, id, last[r.key], "key %s: record %d accepted after %d", r.key, id, last[r.key])
		last[r.key] = id
	}
}

func TestWindowKeepsOrderPerKeyWith64InFlight(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 64, 10*time.Millisecond)
	ids := b.insert(t, customers(1000, 50)...)
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	eventually(t, "every record", func() bool { return len(b.sink.accepted()) == len(ids) })
	reqs := b.sink.requests()
	require.Len(t, reqs, len(ids), "each record sent once: nothing failed")
	checkOrderPerKey(t, reqs)
	b.sink.mu.Lock()
	most := b.sink.maxAll
	b.sink.mu.Unlock()
	require.Greater(t, most, 8, "records of different keys were in flight together")
	require.LessOrEqual(t, most, 64, "never more than the window")
	t.Logf("at most %d requests in flight", most)
}

func TestWindowHaltsOnARefusalAndSkipMovesOn(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 16, 5*time.Millisecond)
	keys := customers(200, 10)
	ids := b.insert(t, keys...)
	bad, badKey := ids[60], keys[60]
	b.sink.refuse = func(id string) bool { return id == bad } // always: only the skip moves past it
	testrun.Start(t, newProcessor(t, b.cfg).Run)

	ctx := context.Background()
	var halt *inordertype.Halt
	eventually(t, "the halt on the refused record", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: "billing"})
		if err != nil || len(procs) == 0 || procs[0].Info.Halt == nil {
			return false
		}
		halt = procs[0].Info.Halt
		return true
	})
	require.Equal(t, bad, halt.RecordID)
	require.True(t, halt.Permanent)
	require.Equal(t, 400, halt.Status)
	procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: "billing"})
	require.NoError(t, err)
	pos, err := strconv.ParseInt(procs[0].Info.Position.ID, 10, 64)
	if procs[0].Info.Position.ID != "" {
		require.NoError(t, err)
		badID, _ := strconv.ParseInt(bad, 10, 64)
		require.Less(t, pos, badID, "the position never passes the refused record")
	}

	_, err = cursor.Skip(ctx, b.db.Pool, "billing", bad, cursor.ActionOpts{Actor: "test", Reason: "unknown customer"})
	require.NoError(t, err)
	eventually(t, "every other record", func() bool { return len(b.sink.accepted()) == len(ids)-1 })

	reqs := b.sink.requests()
	checkOrderPerKey(t, reqs)
	acc := map[string]bool{}
	for _, id := range b.sink.accepted() {
		acc[id] = true
	}
	require.False(t, acc[bad], "the refused record was skipped, never accepted")
	require.Len(t, acc, len(ids)-1, "every other record accepted")
	// Nothing of the refused record's key after it was sent while it was being refused.
	lastBad := 0
	for _, r := range reqs {
		if r.id == bad {
			lastBad = r.start
		}
	}
	for _, r := range reqs {
		id, _ := strconv.ParseInt(r.id, 10, 64)
		badID, _ := strconv.ParseInt(bad, 10, 64)
		if r.key == badKey && id > badID {
			require.Greater(t, r.start, lastBad, "record %s of key %s sent before the refused record %s was skipped", r.id, r.key, bad)
		}
	}
}

func TestWindowKeylessRecordsAreTotallyOrdered(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 32, 5*time.Millisecond)
	keys := customers(300, 20)
	for i := 0; i < len(keys); i += 17 {
		keys[i] = "" // no key
	}
	ids := b.insert(t, keys...)
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	eventually(t, "every record", func() bool { return len(b.sink.accepted()) == len(ids) })
	reqs := b.sink.requests()
	require.Len(t, reqs, len(ids))
	byID := map[string]windowReq{}
	for _, r := range reqs {
		byID[r.id] = r
	}
	for i, id := range ids {
		if keys[i] != "" {
			continue
		}
		k := byID[id]
		for _, before := range ids[:i] {
			require.Less(t, byID[before].end, k.start, "keyless record %s started before record %s ended", id, before)
		}
		for _, after := range ids[i+1:] {
			require.Greater(t, byID[after].start, k.end, "record %s started before keyless record %s ended", after, id)
		}
	}
	checkOrderPerKey(t, reqs)
}

// flightLog is an observer that keeps what it is told of the window.
type flightLog struct {
	processor.Observer
	mu     sync.Mutex
	most   int
	oldest time.Duration
}

func (f *flightLog) InFlight(_ string, records int, oldest time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.most, f.oldest = max(f.most, records), max(f.oldest, oldest)
}

// TestWindowShowsWhatIsInFlight holds one record's request open while the record before it completes: the
// cursor row (status) and the observer (metrics) say one record is in flight, since when.
func TestWindowShowsWhatIsInFlight(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 8, 0)
	ids := b.insert(t, "a", "b") // both start at once; the first completes, the second is held
	held := make(chan struct{})
	b.sink.gate = func(id string) chan struct{} {
		if id == ids[1] {
			return held
		}
		return nil
	}
	obs := &flightLog{Observer: nopObserver{}}
	b.cfg.Observer = obs
	b.cfg.HandlerTimeout = 20 * time.Second
	b.cfg.IdleInTransactionTimeout = 40 * time.Second
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	ctx := context.Background()
	var in cursor.Info
	eventually(t, "status to show the held record in flight", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: "billing"})
		if err != nil || len(procs) == 0 {
			return false
		}
		in = procs[0].Info
		return in.InFlight == 1
	})
	require.Equal(t, ids[0], in.Position.ID, "the position waits on the record in flight")
	require.False(t, in.InFlightSince.IsZero())
	eventually(t, "the observer to be told", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.most >= 1 && obs.oldest > 0
	})
	close(held)
	eventually(t, "every record", func() bool { return len(b.sink.accepted()) == len(ids) })
	eventually(t, "nothing in flight in status", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(procs) == 1 && procs[0].Info.InFlight == 0 && procs[0].Info.Position.ID == ids[1]
	})
}

// nopObserver is told everything and keeps nothing: a test's observer embeds it and overrides what it
// counts.
type nopObserver struct{}

func (nopObserver) Batch(string, int)                    {}
func (nopObserver) PassedOver(string)                    {}
func (nopObserver) SourceWaiting(string, string, bool)   {}
func (nopObserver) Handled(string, time.Duration, error) {}
func (nopObserver) InFlight(string, int, time.Duration)  {}
func (nopObserver) Resent(string, int)                   {}
func (nopObserver) Retrying(string, bool)                {}
func (nopObserver) Halted(string, bool)                  {}
func (nopObserver) SinkUnavailable(string, bool)         {}
func (nopObserver) Position(string, time.Time)           {}
func (nopObserver) Locked(string, bool)                  {}
func (nopObserver) Hold(string, time.Duration)           {}
func (nopObserver) Connected(string, bool)               {}
func (nopObserver) CredentialsRefused(string, string)    {}

// TestWindowHaltsOnAFailureBehindRecordsNotYetStarted: a record of one key is refused while an earlier
// record of another key is still in flight and a later one of that key has not started: the later one
// still goes, the prefix reaches the refused record, and the stream halts on it there.
func TestWindowHaltsOnAFailureBehindRecordsNotYetStarted(t *testing.T) {
	t.Parallel()
	b := setupWindow(t, 8, 0)
	ids := b.insert(t, "a", "a", "b") // a1, a2 of one key, then b
	held := make(chan struct{})
	b.sink.gate = func(id string) chan struct{} {
		if id == ids[0] {
			return held
		}
		return nil
	}
	b.sink.refuse = func(id string) bool { return id == ids[2] }
	b.cfg.RetryMin, b.cfg.RetryMax = time.Minute, time.Minute // one attempt at b while the test looks
	testrun.Start(t, newProcessor(t, b.cfg).Run)
	eventually(t, "the refusal of b while a1 is in flight", func() bool {
		for _, r := range b.sink.requests() {
			if r.id == ids[2] && r.status == http.StatusBadRequest {
				return true
			}
		}
		return false
	})
	close(held)
	ctx := context.Background()
	var in cursor.Info
	eventually(t, "the halt on b", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: "billing"})
		if err != nil || len(procs) == 0 || procs[0].Info.Halt == nil {
			return false
		}
		in = procs[0].Info
		return true
	})
	require.Equal(t, ids[2], in.Halt.RecordID)
	require.Equal(t, ids[1], in.Position.ID, "a2, behind the refused record, went through first")
	require.Equal(t, []string{ids[0], ids[1]}, b.sink.accepted())
	sent := 0
	for _, r := range b.sink.requests() {
		if r.id == ids[2] {
			sent++
		}
	}
	require.Equal(t, 1, sent, "the refused record waits out its backoff")
}
