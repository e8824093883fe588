package cursor

import (
	"time"

	"github.com/inorder-dev/inorder/internal/cursorlock"
	"github.com/inorder-dev/inorder/internal/source"
)

// Position is where a process stands in its source: the (created_at, id) pair of the last record it
// handled. The pair identifies one row totally, so ties on created_at are neither lost nor reordered.
type Position struct {
	// CreatedAt is the created_at of the last record handled. The zero value means the beginning: every
	// row is ahead of the position.
	CreatedAt time.Time
	// ID is the id of the last record handled, as text. An empty ID with a non-zero CreatedAt means "after
	// every row created at or before CreatedAt", the position a process registered with StartFromNow
	// starts at.
	ID string
}

// IsBeginning reports whether the position is before every row.
func (p Position) IsBeginning() bool { return p.CreatedAt.IsZero() }

// String formats the position for logs and status.
func (p Position) String() string { return source.Position(p).String() }

// Halt is the state of a stream stopped on a failing record. It is kept in the cursor row, so an operator
// sees it with `inorder status` without reading logs, and retries keep counting across instances.
type Halt struct {
	// RecordID is the id of the record that fails.
	RecordID string
	// Error is the last error the handler returned for it.
	Error string
	// Permanent reports that the sink refused the record itself (handlers.Permanent: an HTTP 4xx, an
	// oversized message): retrying soon will not help, so an operator should fix the sink or the record,
	// or skip it. False means the failure may pass (a 5xx, a timeout, a network error).
	Permanent bool
	// Status is the sink's own status code for the last failure, where it has one (the HTTP status of a
	// webhook); 0 otherwise.
	Status int
	// Attempts counts the failed deliveries of the record.
	Attempts int
	// FirstFailureAt and LastFailureAt bound the time the stream has been halted.
	FirstFailureAt time.Time
	LastFailureAt  time.Time
	// NextAttemptAt is when the record is tried again.
	NextAttemptAt time.Time
	// HaltedAt is when the stream counted as halted on the record: at its first failure for a permanent
	// one, else once it had failed for longer than the processor's HaltAfter. Zero while the stream is
	// only retrying it, which a short blip at the sink should not turn into a page.
	HaltedAt time.Time
}

// Retrying reports whether the record is being retried with backoff and the stream has not yet counted as
// halted (see HaltedAt).
func (h *Halt) Retrying() bool { return h.HaltedAt.IsZero() }

// State is what a locked cursor row holds.
type State struct {
	Position Position
	// Halt is nil when no record is failing; otherwise the stream is retrying the record or halted on it
	// (Halt.Retrying).
	Halt *Halt
	// Paused is set by an operator (Pause) and stops the process at its next batch until Resume.
	Paused bool
}

// fromLock is the public form of a state as the locking machinery reads it.
func fromLock(st cursorlock.State) State {
	out := State{Position: Position(st.Position), Paused: st.Paused}
	if st.Halt != nil {
		h := Halt(*st.Halt)
		out.Halt = &h
	}
	return out
}
