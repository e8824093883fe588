package webhook_test

import (
	"context"
	"encoding/json"
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

// attemptSink is a receiver that keeps, per record, the Inorder-Attempt header of every request in the
// order they came, and answers as the test says.
type attemptSink struct {
	srv *httptest.Server

	mu       sync.Mutex
	attempts map[string][]int    // record id -> the attempt header of each request, in order
	answer   func(id string) int // the status to answer; it may block (it is called without mu)
}

func newAttemptSink(t *testing.T, answer func(id string) int) *attemptSink {
	t.Helper()
	s := &attemptSink{attempts: map[string][]int{}, answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ID      string `json:"id"`
			Attempt int    `json:"attempt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("sink: decode body: %v", err)
			w.WriteHeader(http.StatusUnsupportedMediaType)
			return
		}
		n, err := strconv.Atoi(r.Header.Get(webhook.AttemptHeader))
		if err != nil || n != body.Attempt {
			t.Errorf("sink: record %s: %s header %q, body attempt %d", body.ID, webhook.AttemptHeader,
				r.Header.Get(webhook.AttemptHeader), body.Attempt)
		}
		s.mu.Lock()
		s.attempts[body.ID] = append(s.attempts[body.ID], n)
		s.mu.Unlock()
		w.WriteHeader(s.answer(body.ID))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// sent returns the attempt headers record id was sent with, in order.
func (s *attemptSink) sent(id string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.attempts[id]...)
}

func (s *attemptSink) all() map[string][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]int{}
	for id, a := range s.attempts {
		out[id] = append([]int(nil), a...)
	}
	return out
}

// requireCounted requires that every record's requests carried 1, 2, 3, ... in turn: no attempt number
// sent twice for one record.
func requireCounted(t *testing.T, s *attemptSink) {
	t.Helper()
	for id, got := range s.all() {
		want := make([]int, len(got))
		for i := range want {
			want[i] = i + 1
		}
		require.Equal(t, want, got, "the %s headers of record %s, request by request", webhook.AttemptHeader, id)
	}
}

// attemptBench is a stream of events with a key column delivered to an attemptSink; the processor backs
// off for a minute after a failure, so that only an operator's retry sends a failed record again while
// the test runs.
type attemptBench struct {
	db  *pgtest.DB
	cfg processor.Config[handlers.Row]
}

func setupAttempts(t *testing.T, s *attemptSink, inFlight int) *attemptBench {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE events (
			id bigserial PRIMARY KEY, customer text, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON events (created_at, id)`)
	pgtest.AddClock(t, db, "events")
	h, err := webhook.New[handlers.Row](webhook.Config{URL: s.srv.URL, Secret: secret})
	require.NoError(t, err)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return &attemptBench{db: db, cfg: processor.Config[handlers.Row]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "billing", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Handler: h, MaxInFlight: inFlight,
		Source:       inordertype.Source{Table: "events", KeyColumn: "customer"},
		PollInterval: 10 * time.Millisecond, RetryMin: time.Minute, RetryMax: time.Minute,
		HandlerTimeout: 10 * time.Second,
		Logger:         zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	}}
}

// insert adds one row per customer, in order, each in its own statement, and returns their ids.
func (b *attemptBench) insert(t *testing.T, customers ...string) []string {
	t.Helper()
	var ids []string
	for _, c := range customers {
		var id int64
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			"INSERT INTO events (customer) VALUES ($1) RETURNING id", c).Scan(&id))
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	return ids
}

func (b *attemptBench) start(t *testing.T) (stop func() error) {
	t.Helper()
	p, err := processor.New(b.cfg)
	require.NoError(t, err)
	return testrun.Start(t, p.Run)
}

// halted waits for the stream to halt on record id and returns the halt.
func (b *attemptBench) halted(t *testing.T, id string) *inordertype.Halt {
	t.Helper()
	var h *inordertype.Halt
	eventually(t, "the halt on record "+id, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		if err != nil || len(procs) != 1 || procs[0].Info.Halt == nil || procs[0].Info.Halt.RecordID != id {
			return false
		}
		h = procs[0].Info.Halt
		return true
	})
	return h
}

// caughtUp waits for the durable position to reach record last: every record before it went through, the
// ones the window sent ahead of a failure included, which the position passes only once sent again.
func (b *attemptBench) caughtUp(t *testing.T, last string) {
	t.Helper()
	eventually(t, "the position at record "+last, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		return err == nil && len(procs) == 1 && procs[0].Info.Position.ID == last
	})
}

func (b *attemptBench) retry(t *testing.T) {
	t.Helper()
	_, err := cursor.Retry(context.Background(), b.db.Pool, b.cfg.Process, cursor.ActionOpts{Actor: "ops", Reason: "sink fixed"})
	require.NoError(t, err)
}

// fixable answers 400 to the records it was told to refuse until fix is called, 200 to every other. It
// also keeps the ids of the test's records for the receiver, which runs on the server's goroutines.
type fixable struct {
	mu      sync.Mutex
	refused map[string]bool
	ids     []string
}

func (f *fixable) setIDs(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = ids
}

// is reports whether id is the test's i-th record.
func (f *fixable) is(id string, i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return i < len(f.ids) && f.ids[i] == id
}

func (f *fixable) refuse(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	for _, id := range ids {
		f.refused[id] = true
	}
}

// refusing reports whether the sink is not fixed yet.
func (f *fixable) refusing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refused) > 0
}

func (f *fixable) code(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused[id] {
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func (f *fixable) fix() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = nil
}

// TestAttemptCountsDeliveriesAcrossAnOperatorsRetry: a record the sink refused and an operator retried
// carries Inorder-Attempt 1, then 2; so does a record that went out ahead of it in the keyed window and is
// sent again once the refused one goes through. No record is ever sent twice with one attempt number.
func TestAttemptCountsDeliveriesAcrossAnOperatorsRetry(t *testing.T) {
	t.Parallel()

	t.Run("one at a time", func(t *testing.T) {
		t.Parallel()
		f := &fixable{}
		s := newAttemptSink(t, f.code)
		b := setupAttempts(t, s, 1)
		ids := b.insert(t, "a", "a", "b")
		f.refuse(ids[1])
		b.start(t)
		require.Equal(t, 1, b.halted(t, ids[1]).Attempts)
		f.fix()
		b.retry(t)
		b.caughtUp(t, ids[len(ids)-1])
		require.Equal(t, []int{1, 2}, s.sent(ids[1]))
		requireCounted(t, s)
	})

	t.Run("one at a time, retried by another instance after a restart", func(t *testing.T) {
		t.Parallel()
		f := &fixable{}
		s := newAttemptSink(t, f.code)
		b := setupAttempts(t, s, 1)
		ids := b.insert(t, "a", "b")
		f.refuse(ids[0])
		stop := b.start(t)
		b.halted(t, ids[0])
		require.NoError(t, stop())
		f.fix()
		b.cfg.ClientConfig.Instance = "another"
		b.start(t)
		b.retry(t)
		b.caughtUp(t, ids[len(ids)-1])
		require.Equal(t, []int{1, 2}, s.sent(ids[0]))
		requireCounted(t, s)
	})

	t.Run("keyed window, a record of another key sent ahead of the refused one", func(t *testing.T) {
		t.Parallel()
		ahead := make(chan struct{}) // closed once the record after the refused one was answered
		var once sync.Once
		f := &fixable{}
		s := newAttemptSink(t, func(id string) int {
			if f.is(id, 0) && f.refusing() {
				<-ahead // the refusal comes once the record of the other key went through
			}
			code := f.code(id)
			if f.is(id, 1) {
				once.Do(func() { close(ahead) })
			}
			return code
		})
		b := setupAttempts(t, s, 8)
		ids := b.insert(t, "a", "b")
		f.setIDs(ids)
		f.refuse(ids[0])
		b.start(t)
		b.halted(t, ids[0])
		require.Equal(t, []int{1}, s.sent(ids[1]), "the record of the other key went out ahead of the refusal")
		f.fix()
		b.retry(t)
		b.caughtUp(t, ids[len(ids)-1])
		require.Equal(t, []int{1, 2}, s.sent(ids[0]))
		require.Equal(t, []int{1}, s.sent(ids[1]), "accepted ahead of the refusal: never sent again by this instance")
		requireCounted(t, s)
	})

	t.Run("keyed window, a later record refused before the record the stream halts on", func(t *testing.T) {
		t.Parallel()
		// The second record (key b) is refused at once, while the first (key a) is still in flight; then
		// the first fails too: the stream halts on the first, and the second, whose failure the cursor row
		// does not keep, goes out again after the retry.
		later := make(chan struct{})
		var once sync.Once
		f := &fixable{}
		s := newAttemptSink(t, func(id string) int {
			if f.is(id, 0) && f.refusing() {
				<-later
			}
			code := f.code(id)
			if f.is(id, 1) {
				once.Do(func() { close(later) })
			}
			return code
		})
		b := setupAttempts(t, s, 8)
		ids := b.insert(t, "a", "b")
		f.setIDs(ids)
		f.refuse(ids[0], ids[1])
		b.start(t)
		b.halted(t, ids[0])
		require.Equal(t, []int{1}, s.sent(ids[1]))
		f.fix()
		b.retry(t)
		b.caughtUp(t, ids[len(ids)-1])
		require.Equal(t, []int{1, 2}, s.sent(ids[0]))
		require.Equal(t, []int{1, 2}, s.sent(ids[1]), "its second delivery")
		requireCounted(t, s)
	})
}
