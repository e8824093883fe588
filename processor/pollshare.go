package processor

import (
	"fmt"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/internal/source"
)

// The poll of the transactions in flight on a source, shared by the processors of one Client that read it.
//
// Every batch starts from a poll of pg_locks (see internal/source), which rides with the lock of the
// cursor row. Its cost grows with the lock table, and an instance that owns many processes holds a
// session-level advisory lock for each: with a thousand processes over one table, a thousand polls of a
// thousand-row lock table, each finding the same transactions, were most of what a new row cost the
// database to reach them all. So a processor's poll is offered to the others of its Client over the same
// source, and a lock of the cursor row leaves its own poll out when a fresh enough one is there to take
// (see horizonWatch.stay).
//
// # Why a poll another transaction made is as good as one's own
//
// What a poll says holds for any read whose snapshot is taken after the poll was answered: a transaction
// absent from pg_locks at the poll's instant can only date its rows after that instant, and one that had
// ended before it is visible to every later snapshot. Which transaction made the poll matters only for
// the transactions it leaves out as its own:
//   - The poll leaves out the polling transaction, and every transaction marked with the no-insert lock,
//     which the cursor transactions of processors with a plain handler are. A poll made by one of them is
//     the poll any other of them would have made, less its own transaction, which is marked.
//   - A TxHandler writes in its cursor transaction, unmarked: a poll made in it would leave out a writer
//     the others must wait for, and a poll made elsewhere would show it its own transaction. So a
//     processor with a TxHandler neither offers its polls nor takes another's.
//
// Each processor folds into its tracker only a poll later than the last it folded (the tracker keeps the
// history of each transaction from one poll to the next), so a poll taken is never older than its own.
// A shared poll changes only how fresh the horizon is, never what lies below it.

// shareFresh is how old a shared poll may be, from when it was sent, for a batch to take it instead of
// polling itself, unless the batch follows a wake-up (see horizonWatch.stay): what committed since is
// left for the next batch, a few milliseconds later.
const shareFresh = 5 * time.Millisecond

// pollShare is the latest poll of the transactions in flight on one source made by a processor of the
// Client, for the others to take.
type pollShare struct {
	mu   sync.Mutex
	o    source.Observation
	sent time.Time // when its statement was sent, by this process's clock
}

// offer makes o, sent at sent, the poll to take, unless a later one is there.
func (s *pollShare) offer(o source.Observation, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(s.sent) {
		s.o, s.sent = o, sent
	}
}

// latest returns the poll to take and when it was sent (zero: none yet).
func (s *pollShare) latest() (source.Observation, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.o, s.sent
}

// pollShares are the shared polls of a Client, one per source and poll statement.
type pollShares struct {
	mu sync.Mutex
	m  map[string]*pollShare
}

// of returns the shared poll of t.
func (ps *pollShares) of(t *source.Table) *pollShare {
	sql, args := t.LocksQuery()
	key := fmt.Sprint(sql, args)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[string]*pollShare{}
	}
	s, ok := ps.m[key]
	if !ok {
		s = &pollShare{}
		ps.m[key] = s
	}
	return s
}

// takes reports whether a shared poll sent at sent, taken at its server's instant at, may serve a batch
// now instead of its own: it is later than the last poll the processor folded (lastPoll), and was sent
// after need, or, when need is zero, within shareFresh of now.
func takes(at, sent, lastPoll, need, now time.Time) bool {
	if sent.IsZero() || !at.After(lastPoll) {
		return false
	}
	if need.IsZero() {
		need = now.Add(-shareFresh)
	}
	return !sent.Before(need)
}
