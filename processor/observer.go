package processor

import "time"

// Observer is told what a processor does, for metrics. Every method is called from the processor's own
// goroutine and must return quickly.
type Observer interface {
	// Batch reports a read of n records.
	Batch(process string, n int)
	// Handled reports one handler call (or async result) and its outcome.
	Handled(process string, took time.Duration, err error)
	// Position reports the created_at of the new position after an advance.
	Position(process string, createdAt time.Time)
	// Halted reports that the stream halted on a failing record (see Config.HaltAfter), or no longer is.
	Halted(process string, halted bool)
	// Locked reports whether this instance holds the cursor.
	Locked(process string, locked bool)
	// Hold reports how long the transaction limiting the horizon has been in flight (0 for none).
	Hold(process string, held time.Duration)
	// Connected reports whether the processor has a working database connection: false when it lost it
	// and is reconnecting, true once it is back (and after start-up).
	Connected(process string, ok bool)
}

// RetryObserver is an Observer that is also told when a stream is retrying a failing record before it
// counts as halted (see Config.HaltAfter).
type RetryObserver interface {
	Observer
	// Retrying reports that the stream retries a failing record, or no longer does (it went through,
	// was skipped, or the stream now counts as halted).
	Retrying(process string, retrying bool)
}

// UnavailableObserver is an Observer that is also told when a stream waits for a sink that refuses what
// every record would meet (see handlers.Unavailable), and when the sink accepts again.
type UnavailableObserver interface {
	Observer
	// SinkUnavailable reports that the stream waits for its sink, or no longer does.
	SinkUnavailable(process string, unavailable bool)
}

// CredentialsObserver is an Observer that is also told when the database refuses the credentials of a
// processor that had connected (a password rotated under it, a token that expired), and when it accepts
// them again. The processor waits such a refusal out, reconnecting with backoff.
type CredentialsObserver interface {
	Observer
	// CredentialsRefused reports the refusal, in the line that says so and names the user and the server
	// ("the database refused the credentials of user app on db:5432 (...)"), or, with "", that the
	// database accepts the credentials again.
	CredentialsRefused(process string, refusal string)
}

type nopObserver struct{}

func (nopObserver) Batch(string, int)                    {}
func (nopObserver) Handled(string, time.Duration, error) {}
func (nopObserver) Position(string, time.Time)           {}
func (nopObserver) Halted(string, bool)                  {}
func (nopObserver) Locked(string, bool)                  {}
func (nopObserver) Hold(string, time.Duration)           {}
func (nopObserver) Connected(string, bool)               {}
