package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
)

// attemptSink counts, per record, the attempt numbers it was handed, and refuses some records until it is
// fixed. As an AsyncHandler it sends the records of a batch before it settles any (four at once), so that
// the records after a refused one are sent ahead of it.
type attemptSink struct {
	mu       sync.Mutex
	attempts map[int64][]int
	refused  map[int64]bool
}

func newAttemptSink(refuse ...int64) *attemptSink {
	s := &attemptSink{attempts: map[int64][]int{}, refused: map[int64]bool{}}
	for _, id := range refuse {
		s.refused[id] = true
	}
	return s
}

// take notes a delivery of rec and says how the sink answers it.
func (s *attemptSink) take(rec *handlers.Record[event]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[rec.Value.ID] = append(s.attempts[rec.Value.ID], rec.Attempt)
	if s.refused[rec.Value.ID] {
		return handlers.Permanent(errTest)
	}
	return nil
}

func (s *attemptSink) Handle(_ context.Context, rec *handlers.Record[event]) error {
	return s.take(rec)
}

func (s *attemptSink) fix() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = map[int64]bool{}
}

func (s *attemptSink) sent(id int64) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.attempts[id]...)
}

// asyncAttemptSink is attemptSink as an AsyncHandler: the answer is known at send, told at Wait.
type asyncAttemptSink struct{ *attemptSink }

type answered struct{ err error }

func (a answered) Wait(context.Context) error { return a.err }

func (s asyncAttemptSink) Send(_ context.Context, rec *handlers.Record[event]) (handlers.Result, error) {
	return answered{s.take(rec)}, nil
}

func (s asyncAttemptSink) MaxInFlight() int { return 4 }

// TestRecordsSentAheadOfAFailureCountTheirAttempts: with an AsyncHandler and with the keyed window, the
// records the sink accepted ahead of a refused record are not sent again once an operator's retry lets it
// through; the refused record goes as its second attempt; no record is handed the same attempt number
// twice.
func TestRecordsSentAheadOfAFailureCountTheirAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		async bool
	}{{"AsyncHandler", true}, {"keyed window", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.insert(t, 3)
			s := newAttemptSink(ids[0])
			b.cfg.Handler = s
			if tc.async {
				b.cfg.Handler = asyncAttemptSink{s}
			} else {
				// One key per record, so that all three go out at once.
				b.cfg.Source.KeyColumn, b.cfg.MaxInFlight = "seq", 4
			}
			b.cfg.RetryMin, b.cfg.RetryMax = time.Minute, time.Minute // only the operator's retry sends it again
			start(t, b.cfg)
			waitFor(t, "the halt on the first record", func() bool {
				h := b.halt(t)
				return h != nil && h.RecordID == idText(ids[0])
			})
			// Sent together: the two after the refused one went out ahead of it.
			require.Equal(t, []int{1}, s.sent(ids[1]))
			require.Equal(t, []int{1}, s.sent(ids[2]))
			s.fix()
			_, err := cursor.Retry(context.Background(), b.db.Pool, b.cfg.Process, cursor.ActionOpts{Actor: "ops", Reason: "fixed"})
			require.NoError(t, err)
			// The position passes the records sent ahead only once they went out again.
			waitFor(t, "the position at the last record", func() bool {
				_, id := b.position(t, b.cfg.Process)
				return id == idText(ids[len(ids)-1])
			})
			require.Equal(t, []int{1, 2}, s.sent(ids[0]), "the refused record")
			for _, id := range ids[1:] {
				// Both windows keep what the sink accepted: never sent again by this instance.
				require.Equal(t, []int{1}, s.sent(id), "record %d, accepted ahead of the failure", id)
			}
		})
	}
}

// resentLog is an observer that counts what it is told of records sent again.
type resentLog struct {
	processor.Observer
	mu     sync.Mutex
	resent int
}

func (r *resentLog) Resent(_ string, records int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resent += records
}

func (r *resentLog) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resent
}

// TestARecordAcceptedAheadIsSentAgainOnlyAfterALostConnection: with the keyed window, the records the sink
// accepted ahead of a refused one are not sent again while this instance keeps the process; once its
// connection is cut (a new tenure, in which an operator may have moved the position meanwhile) they are,
// and the observer (inorder_sink_resent_total) counts each of them.
func TestARecordAcceptedAheadIsSentAgainOnlyAfterALostConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 3)
	s := newAttemptSink(ids[0])
	obs := &resentLog{Observer: nopObserver{}}
	b.cfg.Handler, b.cfg.Observer = s, obs
	b.cfg.Source.KeyColumn, b.cfg.MaxInFlight = "seq", 4 // one key per record: all three go out at once
	b.cfg.RetryMin, b.cfg.RetryMax = 50*time.Millisecond, 50*time.Millisecond
	b.cfg.ClientConfig.Instance = "resender"
	start(t, b.cfg)
	waitFor(t, "the first record refused twice", func() bool { return len(s.sent(ids[0])) >= 2 })
	require.Equal(t, []int{1}, s.sent(ids[1]), "accepted ahead of the refusal: not sent again")
	require.Equal(t, []int{1}, s.sent(ids[2]), "accepted ahead of the refusal: not sent again")
	require.Zero(t, obs.count())

	// Every connection of the instance (its session, and the one its batches take turns on) goes.
	var killed int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE $1 AND datname = current_database()",
		"inorder%@resender").Scan(&killed))
	require.Positive(t, killed)
	s.fix()
	waitFor(t, "the position at the last record", func() bool {
		_, id := b.position(t, b.cfg.Process)
		return id == idText(ids[len(ids)-1])
	})
	require.Len(t, s.sent(ids[1]), 2, "sent again in the new tenure")
	require.Len(t, s.sent(ids[2]), 2, "sent again in the new tenure")
	require.Equal(t, 2, obs.count(), "each record sent again after the sink accepted it is counted")
}

// refusingAtSend is attemptSink as an AsyncHandler that refuses at Send what it refuses.
type refusingAtSend struct{ *attemptSink }

func (s refusingAtSend) Send(_ context.Context, rec *handlers.Record[event]) (handlers.Result, error) {
	if err := s.take(rec); err != nil {
		return nil, err
	}
	return answered{}, nil
}

func (s refusingAtSend) MaxInFlight() int { return 4 }

// TestAnAsyncRefusalAtSendIsJudgedInItsTurn: a record an AsyncHandler refuses at Send takes its turn: the
// records before it settle first, nothing is sent after it, and its fate, decided then, halts the stream
// on it, as the cursor row says (its first attempt, refused for good). Once it goes through, the rest
// follows in order.
func TestAnAsyncRefusalAtSendIsJudgedInItsTurn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 3)
	s := newAttemptSink(ids[1])
	b.cfg.Handler = refusingAtSend{s}
	b.cfg.RetryMin, b.cfg.RetryMax = time.Minute, time.Minute // only the operator's retry sends it again
	start(t, b.cfg)
	waitFor(t, "the halt on the second record", func() bool {
		h := b.halt(t)
		return h != nil && h.RecordID == idText(ids[1])
	})
	h := b.halt(t)
	require.Equal(t, 1, h.Attempts)
	require.True(t, h.Permanent)
	require.False(t, h.HaltedAt.IsZero(), "refused for good: halted")
	_, id := b.position(t, b.cfg.Process)
	require.Equal(t, idText(ids[0]), id, "the record before it settled")
	require.Empty(t, s.sent(ids[2]), "nothing is sent after a refusal before its turn")

	s.fix()
	_, err := cursor.Retry(context.Background(), b.db.Pool, b.cfg.Process, cursor.ActionOpts{Actor: "ops", Reason: "fixed"})
	require.NoError(t, err)
	waitFor(t, "the position at the last record", func() bool {
		_, id := b.position(t, b.cfg.Process)
		return id == idText(ids[len(ids)-1])
	})
	require.Equal(t, []int{1, 2}, s.sent(ids[1]))
	require.Equal(t, []int{1}, s.sent(ids[2]))
}
