package processor

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
)

// failing is what this instance knows of the record its stream fails on: what it last told of it (told),
// and when it is tried next (nextAt). What it knows of the attempts at it, and at the records delivered
// ahead of it, is the executor's (see attempts).
type failing struct {
	told failState
	// nextAt is the next attempt at the failing record that the cursor row said last, on the database's
	// clock, as the row keeps it: a next attempt earlier than it is an operator's retry.
	nextAt time.Time
	// process is told to obs, and log says the changes.
	process string
	obs     Observer
	log     zerolog.Logger
}

// failState is what a stream is doing about a failing record.
type failState int

const (
	failNone        failState = iota
	failRetrying              // retrying it with backoff, for less than HaltAfter
	failHalted                // halted on it: refused for good, or failing for longer than HaltAfter
	failUnavailable           // the sink refuses what every record would meet: waiting for it, never halting
)

// resumed notes that record id, on its attempt, went through: a record which had failed before ends the
// failure.
func (f *failing) resumed(id string, attempt int) {
	if attempt > 1 {
		f.nextAt = time.Time{}
		was := f.note(nil)
		if was == failUnavailable {
			return // said by note: the sink's outage is over
		}
		msg := "the record went through; retrying is over"
		if was == failHalted {
			msg = "stream resumed: the halted record went through"
		}
		f.log.Info().Str("record", id).Int("attempt", attempt).Msg(msg)
	}
}

// note tells the observer what the stream does now about h, the failing record (nil: none), and returns
// what it did before.
func (f *failing) note(h *inordertype.Halt) failState {
	now := failNone
	switch {
	case h == nil:
	case h.SinkUnavailable():
		now = failUnavailable
	case !h.HaltedAt.IsZero():
		now = failHalted
	default:
		now = failRetrying
	}
	was := f.told
	if now != was {
		f.told = now
		f.obs.Halted(f.process, now == failHalted)
		f.obs.Retrying(f.process, now == failRetrying)
		f.obs.SinkUnavailable(f.process, now == failUnavailable)
		if was == failUnavailable {
			f.log.Info().Msg("the sink accepts again: its outage is over, and the stream flows")
		}
	}
	return was
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
