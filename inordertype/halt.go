package inordertype

import "time"

// Halt is the state of a stream stopped on a failing record. It is kept in the cursor row, so that an
// operator sees it with `inorder status` without reading logs, and retries keep counting across instances:
// whichever instance works the process next goes on from the same attempt and backoff.
type Halt struct {
	// RecordID is the id of the record that fails, as text. An operator's skip must name it, so that a
	// skip typed for one record never passes another.
	RecordID string
	// Error is the last error the handler returned for the record, as its text.
	Error string
	// Permanent reports that the sink refused the record itself (handlers.Permanent: an HTTP 4xx, an
	// oversized message): retrying soon will not help, so an operator should fix the sink or the record,
	// or skip it. False means the failure may pass (a 5xx, a timeout, a network error).
	Permanent bool
	// Status is the sink's own status code for the last failure, where it has one (the HTTP status of a
	// webhook); 0 otherwise.
	Status int
	// Attempts counts the failed deliveries of the record, across instances and restarts; the backoff
	// before the next attempt grows with it.
	Attempts int
	// FirstFailureAt is when the record first failed: how long the stream has been stuck on it.
	FirstFailureAt time.Time
	// LastFailureAt is when the record last failed.
	LastFailureAt time.Time
	// NextAttemptAt is when the record is tried again; an operator's retry (`inorder retry`) brings it
	// forward to now.
	NextAttemptAt time.Time
	// HaltedAt is when the stream counted as halted on the record: at its first failure for a permanent
	// one, else once it had failed for longer than the processor's HaltAfter. Zero while the stream is
	// only retrying it (Retrying), which a short blip at the sink should not turn into a page, and while
	// the sink is unavailable.
	HaltedAt time.Time
	// Unavailable, when not empty, says that the failure is the sink's, not the record's: every record
	// would meet it (handlers.Unavailable: a wrong URL, a revoked key, a missing topic, a sink down). It
	// says what to check. The stream waits and retries for as long as it lasts and never halts on it;
	// skipping the record would not help.
	Unavailable string
}

// SinkUnavailable reports whether the failure is the sink's outage rather than the record's (see
// Unavailable).
func (h *Halt) SinkUnavailable() bool { return h.Unavailable != "" }

// Retrying reports whether the record is being retried with backoff and the stream has not yet counted as
// halted (see HaltedAt).
func (h *Halt) Retrying() bool { return h.HaltedAt.IsZero() }

// State is what a process's cursor row holds about its progress: where it stands, whether a record is
// failing, and what an operator asked of it.
type State struct {
	// Position is where the process stands: just after the last record it handled. It moves only
	// forward, in the same transaction as the lock that proves the writer still owns the process, except
	// by an operator's audited rewind or skip.
	Position Position
	// Halt is nil when no record is failing; otherwise the stream is retrying the record or halted on it
	// (Halt.Retrying).
	Halt *Halt
	// Paused is set by an operator (cursor.Pause) and stops the process at its next batch until resumed
	// (cursor.Resume); it survives restarts, since it lives in the row.
	Paused bool
	// RedriveRequestedAt, when not zero, is when an operator last asked for parked records to be
	// delivered (cursor.Redrive, or a skip of a parked record) and the processor has not looked yet.
	RedriveRequestedAt time.Time
}
