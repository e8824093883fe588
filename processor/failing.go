package processor

import (
	"time"

	"github.com/inorder-dev/inorder/handlers"
)

// failing is what this instance knows of the record its stream fails on: what it last told of it (told),
// and when it is tried next (nextAt). What it knows of the attempts at it, and at the records delivered
// ahead of it, is the executor's (see attempts).
type failing struct {
	told failState
	// nextAt is the next attempt at the failing record that the cursor row said last, on the database's
	// clock, as the row keeps it: a next attempt earlier than it is an operator's retry.
	nextAt time.Time
}

// failState is what a stream is doing about a failing record.
type failState int

const (
	failNone        failState = iota
	failRetrying              // retrying it with backoff, for less than HaltAfter
	failHalted                // halted on it: refused for good, or failing for longer than HaltAfter
	failUnavailable           // the sink refuses what every record would meet: waiting for it, never halting
)

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
