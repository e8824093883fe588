package processor

import (
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
)

// failing is what this instance knows of the records that fail in its stream: what it last told of the
// failing record (told), when it is tried next (retryAt, nextAt), and the records it handed to the handler
// that the position has not moved past (sent), which go out again after the failure with the next attempt
// number.
//
// The cursor row counts the failed attempts of the record the stream halts on, across instances. The
// records delivered ahead of it are the keyed window's and an AsyncHandler's: records of other keys
// already sent, or refused, when the first record in order failed. The position stops before them, so
// they are delivered again once the failing record goes through or is skipped; sent remembers how many
// times this instance sent each of them, so that a receiver never sees one attempt number twice for a
// record (an instance that takes over after a crash knows only the cursor row's count).
type failing struct {
	told failState
	// retryAt is the earliest next attempt at the failing record, from this instance's own backoff, and
	// nextAt the next attempt the cursor row said last (an earlier one: an operator's retry).
	retryAt, nextAt time.Time
	sent            map[string]sentRecord // by record id
}

// failState is what a stream is doing about a failing record.
type failState int

const (
	failNone        failState = iota
	failRetrying              // retrying it with backoff, for less than HaltAfter
	failHalted                // halted on it: refused for good, or failing for longer than HaltAfter
	failUnavailable           // the sink refuses what every record would meet: waiting for it, never halting
)

// sentRecord is a record handed to the handler without the position moving past it: when it was created
// (to forget it once the position is past), and the attempt number it last went out with.
type sentRecord struct {
	createdAt time.Time
	attempt   int
}

// attemptOf is the attempt number of record id in a batch that starts from st: one more than the failed
// attempts the cursor row counts when it is the failing record, else 1.
func attemptOf(st inordertype.State, id string) int {
	if st.Halt != nil && st.Halt.RecordID == id {
		return st.Halt.Attempts + 1
	}
	return 1
}

// attempt is the attempt number it goes out with now: one more than the cursor row counts (attemptOf),
// or than the last attempt at it this instance sent, whichever is more.
func (p *Processor[T]) attempt(st inordertype.State, it *item[T]) int {
	n := attemptOf(st, it.rec.ID)
	if s, ok := p.failing.sent[it.rec.ID]; ok && s.attempt >= n {
		n = s.attempt + 1
	}
	return n
}

// forgetPassed forgets the records sent before that the durable position pos is past (by this instance
// or another, or an operator's skip), at the start of a batch.
func (f *failing) forgetPassed(pos inordertype.Position) {
	for id, s := range f.sent {
		if s.createdAt.Before(pos.CreatedAt) {
			delete(f.sent, id)
		}
	}
}

// settled notes how the delivery of a batch ended: the position moved past its first n records, and the
// records after them that sent says the handler was given (the failing record, and what the keyed window
// or an AsyncHandler sent ahead of it) will go out again with their next attempt number.
func (p *Processor[T]) settled(items []item[T], n int, sent func(i int) bool) {
	f := &p.failing
	if len(f.sent) > 0 {
		for i := range items[:n] {
			delete(f.sent, items[i].rec.ID)
		}
	}
	for i := n; i < len(items); i++ {
		if !sent(i) {
			continue
		}
		if f.sent == nil {
			f.sent = map[string]sentRecord{}
		}
		f.sent[items[i].rec.ID] = sentRecord{createdAt: items[i].pos.CreatedAt, attempt: items[i].rec.Attempt}
	}
}

// unavailable says what to check when err is the sink's outage rather than the record's failure
// (handlers.Unavailable), and "" otherwise.
func unavailable(err error) string {
	u, ok := handlers.UnavailableOf(err)
	switch {
	case !ok:
		return ""
	case u.Check == "":
		return "the sink"
	}
	return u.Check
}
