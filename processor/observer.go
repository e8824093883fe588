package processor

import "time"

// Observer is told what a processor does, for metrics (ops.Metrics is one). Every method is called from the
// processor's own goroutines and must return quickly, without blocking. A program that counts only some of
// these embeds an Observer (ops.Metrics, or one of its own that does nothing) and overrides what it counts.
type Observer interface {
	// Batch reports a read of n records.
	Batch(process string, n int)
	// PassedOver says that process moved its position past rows its filter passed over (inordertype.Source's
	// Where), without a handler call.
	PassedOver(process string)
	// SourceWaiting reports that the stream waits for column of its source, or for the table when column is
	// empty (waiting true), or that it reads again (waiting false, column empty): a migration dropped or
	// renamed a column the stream needs, and the stream reads on by itself once the table fits again.
	SourceWaiting(process, column string, waiting bool)
	// Handled reports one handler call (or async result) and its outcome.
	Handled(process string, took time.Duration, err error)
	// InFlight reports what a keyed window has in flight (see Config.MaxInFlight): how many records, and for
	// how long the oldest of them (0 for none).
	InFlight(process string, records int, oldest time.Duration)
	// Resent reports records this instance hands to the sink again although the sink had accepted them:
	// what a lost connection (or another instance's tenure in between) makes it deliver again. Records
	// retried because they failed are not counted, nor what an operator's rewind delivers again on purpose.
	Resent(process string, records int)
	// Retrying reports that the stream retries a failing record before it counts as halted (see
	// Config.HaltAfter), or no longer does (it went through, was skipped, or the stream now counts as
	// halted).
	Retrying(process string, retrying bool)
	// Halted reports that the stream halted on a failing record (see Config.HaltAfter), or no longer is.
	Halted(process string, halted bool)
	// SinkUnavailable reports that the stream waits for a sink that refuses what every record would meet
	// (see handlers.Unavailable), or no longer does: the sink accepts again.
	SinkUnavailable(process string, unavailable bool)
	// Position reports the created_at of the new position after an advance.
	Position(process string, createdAt time.Time)
	// Locked reports whether this instance holds the cursor.
	Locked(process string, locked bool)
	// Hold reports how long the transaction limiting the horizon has been in flight (0 for none).
	Hold(process string, held time.Duration)
	// Connected reports whether the processor has a working database connection: false when it lost it
	// and is reconnecting, true once it is back (and after start-up).
	Connected(process string, ok bool)
	// CredentialsRefused reports that the database refuses the credentials of a processor that had
	// connected (a password rotated under it, a token that expired), in the line that says so and names
	// the user and the server ("the database refused the credentials of user app on db:5432 (...)"), or,
	// with "", that the database accepts the credentials again. The processor waits such a refusal out,
	// reconnecting with backoff.
	CredentialsRefused(process string, refusal string)
}

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
