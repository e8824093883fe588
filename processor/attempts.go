package processor

import (
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// attempts is what the executor knows of the attempt numbers of the records it hands to the handler
// beyond what the cursor row counts: the records it sent that the position has not moved past (sent),
// which go out again after a failure with the next attempt number, and those the sink accepted ahead of
// the position (accepted), which are not sent again.
//
// The cursor row counts the failed attempts of the record the stream halts on, across instances. The
// records delivered ahead of it are the keyed window's and an AsyncHandler's: records of other keys
// already sent, or refused, when the first record in order failed. The position stops before them, so
// they are delivered again once the failing record goes through or is skipped; sent remembers how many
// times this instance sent each of them, so that a receiver never sees one attempt number twice for a
// record (an instance that takes over after a crash knows only the cursor row's count).
type attempts struct {
	sent map[string]sentRecord // by record id
	// accepted are the records ahead of the position that the sink accepted (see acceptedRecord), by
	// record id.
	accepted map[string]acceptedRecord
}

// acceptedRecord is a record that the sink accepted while the position stopped before it (the keyed
// window went on with other keys after a record failed): when it was created (to forget it once the
// position is past), and the tenure in which it was accepted. In that tenure it is not sent again: it
// counts as succeeded when its batch is read again. In a later tenure (after a lost connection, or
// another instance in between) it is sent again, since an operator may have moved the position back
// meanwhile, and counted as sent again (ResentObserver).
type acceptedRecord struct {
	createdAt time.Time
	tenure    int64 // tenure.gen
}

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
func (e *executor[T]) attempt(st inordertype.State, it *item[T]) int {
	n := attemptOf(st, it.rec.ID)
	if s, ok := e.attempts.sent[it.rec.ID]; ok && s.attempt >= n {
		n = s.attempt + 1
	}
	return n
}

// forgetPassed forgets the records sent before that the durable position pos is past (by this instance
// or another, or an operator's skip), at the start of a batch.
func (f *attempts) forgetPassed(pos inordertype.Position) {
	for id, s := range f.sent {
		if s.createdAt.Before(pos.CreatedAt) {
			delete(f.sent, id)
		}
	}
	for id, a := range f.accepted {
		if a.createdAt.Before(pos.CreatedAt) {
			delete(f.accepted, id)
		}
	}
}

// accept notes that the sink accepted it in tenure gen (tenure.gen) while the position stays before it.
func (e *executor[T]) accept(it *item[T], gen int64) {
	if e.attempts.accepted == nil {
		e.attempts.accepted = map[string]acceptedRecord{}
	}
	e.attempts.accepted[it.rec.ID] = acceptedRecord{createdAt: it.pos.CreatedAt, tenure: gen}
}

// acceptedBefore reports whether the sink accepted it already in tenure gen, the one under way, so that
// it is not sent again.
func (e *executor[T]) acceptedBefore(it *item[T], gen int64) bool {
	a, ok := e.attempts.accepted[it.rec.ID]
	return ok && a.tenure == gen
}

// sending notes that it is handed to the sink now: when the sink had accepted it before (in an earlier
// tenure, or because what should have kept it from going again failed), it is counted as sent again.
func (e *executor[T]) sending(it *item[T]) {
	if _, ok := e.attempts.accepted[it.rec.ID]; ok {
		delete(e.attempts.accepted, it.rec.ID)
		e.obs.Resent(e.process, 1)
	}
}

// forgetAccepted forgets the records accepted ahead of the position: an operator moved it, and what lies
// after it is delivered again on purpose.
func (f *attempts) forgetAccepted() { clear(f.accepted) }

// settled notes how the delivery of a batch ended: the position moved past its first n records, and the
// records after them that sent says the handler was given (the failing record, and what the keyed window
// or an AsyncHandler sent ahead of it) will go out again with their next attempt number.
func (e *executor[T]) settled(items []item[T], n int, sent func(i int) bool) {
	f := &e.attempts
	if len(f.sent) > 0 || len(f.accepted) > 0 {
		for i := range items[:n] {
			delete(f.sent, items[i].rec.ID)
			delete(f.accepted, items[i].rec.ID)
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
