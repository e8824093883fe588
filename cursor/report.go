package cursor

import (
	"context"
	"encoding/json"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// StreamStatus is what a process is doing, by the rules `inorder status` shows: one word an admin page or
// an alert can branch on.
type StreamStatus string

// The statuses, in the order they are decided (see Info.Status).
const (
	// StatusPartitioned is the parent row of a partitioned process; each partition has a row of its own.
	StatusPartitioned StreamStatus = "partitioned"
	// StatusPaused: an operator paused it (Pause).
	StatusPaused StreamStatus = "paused"
	// StatusRetrying: a record fails with errors that may pass, and is retried with backoff.
	StatusRetrying StreamStatus = "retrying"
	// StatusHalted: the sink refused a record, or it has failed for longer than the processor's HaltAfter.
	StatusHalted StreamStatus = "halted"
	// StatusSinkUnavailable: the sink refuses what every record would meet (a wrong URL, a revoked key, a
	// missing topic, a sink down): the stream waits and retries, and flows again by itself once the sink
	// accepts. Nothing is halted or parked for it, and skipping the record would not help.
	StatusSinkUnavailable StreamStatus = "sink unavailable"
	// StatusSourceChanged: a migration of the source took a column the process needs (dropped or renamed),
	// or left the table failing a check of start-up: the stream waits, skipping nothing, and reads on by
	// itself once the table fits again. Info.SourceWait says which column and what to do.
	StatusSourceChanged StreamStatus = "source changed"
	// StatusNotRunning: no instance runs the process.
	StatusNotRunning StreamStatus = "not running"
	// StatusHeld: records are behind, and an open transaction holds the horizon before them.
	StatusHeld StreamStatus = "held"
	// StatusRunning: records are behind and being delivered (or, when nobody looked, an instance runs it).
	StatusRunning StreamStatus = "running"
	// StatusIdle: an instance runs it and nothing is behind.
	StatusIdle StreamStatus = "idle"
)

// statusOf decides the status of in, given how far behind it is. Without lag (nil), in.CaughtUp says
// that nothing is behind (Read looks for a row after the position): the stream is StatusIdle. Otherwise
// the rows behind are unknown, and a process an instance runs, not paused, failing or held, is
// StatusRunning.
//
// A sink's outage and a retry are what a running instance does: when no instance runs the process, it is
// StatusNotRunning, and the row's failure (in.Halt) says what happened when it last ran; the next owner
// tries the record again at once. A halted stream stays StatusHalted, running or not: an operator acts.
func statusOf(in Info, lag *Lag) StreamStatus {
	running := in.Connected > 0 || in.Locked
	switch {
	case in.Partitions > 0:
		return StatusPartitioned
	case in.Paused:
		return StatusPaused
	case in.SourceWait != "" && in.Halt == nil && running:
		return StatusSourceChanged
	case in.Halt != nil && in.Halt.SinkUnavailable() && running:
		return StatusSinkUnavailable
	case in.Halt != nil && in.Halt.Retrying() && running:
		return StatusRetrying
	case in.Halt != nil && !in.Halt.SinkUnavailable() && !in.Halt.Retrying():
		return StatusHalted
	case !running:
		return StatusNotRunning
	case lag == nil && in.CaughtUp:
		return StatusIdle
	case lag == nil && !in.HeldSince.IsZero():
		return StatusHeld
	case lag == nil:
		return StatusRunning
	case !in.HeldSince.IsZero() && lag.Rows > 0:
		return StatusHeld
	case lag.Rows > 0:
		return StatusRunning
	}
	return StatusIdle
}

// Measure reads how far behind the process is into in.Lag (and in.CaughtUp) and decides
// in.Status with it, by the same rule as Read. A process that has not run has no lag and keeps its status;
// a failed measurement is kept in in.LagError and returned.
func (in *Info) Measure(ctx context.Context, db DB) error {
	if in.Source.Table == "" {
		return nil
	}
	lag, err := behind(ctx, db, *in)
	if err != nil {
		in.LagError = err.Error()
		return err
	}
	in.Lag, in.LagError, in.CaughtUp = &lag, "", lag.Rows == 0
	in.Status = statusOf(*in, in.Lag)
	return nil
}

// MarshalJSON encodes in as `inorder status --json` prints each process, with the same names; times that
// may be unset are null. The form is documented in docs/operating.md and only ever added to.
func (in Info) MarshalJSON() ([]byte, error) { return json.Marshal(in.report()) }

// infoJSON is the documented JSON form of a process.
type infoJSON struct {
	Process        string               `json:"process"`
	State          StreamStatus         `json:"state"`
	Partitions     int                  `json:"partitions,omitempty"`
	Paused         bool                 `json:"paused"`
	RecordsHandled int64                `json:"records_handled"`
	Throughput     float64              `json:"throughput_per_second"`
	Locked         bool                 `json:"locked"`
	Holder         string               `json:"holder,omitempty"`
	HolderPID      int                  `json:"holder_pid,omitempty"`
	Epoch          int64                `json:"owner_epoch"`
	LeaseExpiresAt *time.Time           `json:"lease_expires_at"`
	Connected      int                  `json:"instances_connected"`
	Position       inordertype.Position `json:"position"`
	Source         *sourceJSON          `json:"source,omitempty"`
	Behind         *behindJSON          `json:"behind,omitempty"`
	Halt           *haltJSON            `json:"halt"`
	Hold           *holdJSON            `json:"hold"`
	InFlight       *inFlightJSON        `json:"in_flight"`
	Parked         *parkedJSON          `json:"parked"`
	Late           *lateJSON            `json:"late"`
	SourceWait     *string              `json:"source_wait"`
	Error          string               `json:"error,omitempty"`
	UpdatedAt      time.Time            `json:"updated_at"`
}

type sourceJSON struct {
	Table           string         `json:"table"`
	IDColumn        string         `json:"id_column"`
	CreatedAtColumn string         `json:"created_at_column"`
	KeyColumn       string         `json:"key_column,omitempty"`
	Partition       *partitionJSON `json:"partition,omitempty"`
	// Tracking is what orders the position and what the read waits for (inordertype.Horizon): clock,
	// writers or transactions; absent for a position recorded before migration 14.
	Tracking string `json:"tracking,omitempty"`
	// Where is the process's filter (inordertype.Source.Where): only the rows it keeps are delivered, and the
	// position moves past the others without a handler call. Absent for a process without one.
	Where string `json:"where,omitempty"`
}

type partitionJSON struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

type behindJSON struct {
	Rows             int64      `json:"rows"`
	Capped           bool       `json:"capped"`
	OldestCreatedAt  *time.Time `json:"oldest_created_at"`
	OldestAgeSeconds float64    `json:"oldest_age_seconds"`
}

type haltJSON struct {
	RecordID       string     `json:"record_id"`
	Error          string     `json:"error"`
	Permanent      bool       `json:"permanent"`
	Status         *int       `json:"status"`
	Attempts       int        `json:"attempts"`
	FirstFailureAt time.Time  `json:"first_failure_at"`
	LastFailureAt  time.Time  `json:"last_failure_at"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	HaltedAt       *time.Time `json:"halted_at"`
	// Unavailable is what to check while the sink is unavailable (the failure is the sink's, not the
	// record's); null otherwise.
	Unavailable *string `json:"unavailable"`
}

type holdJSON struct {
	WriterPID int       `json:"writer_pid"`
	Since     time.Time `json:"since"`
}

type parkedJSON struct {
	Keys           int       `json:"keys"`
	Records        int       `json:"records"`
	Since          time.Time `json:"since"`
	AgeSeconds     float64   `json:"age_seconds"`
	OldestRecordID string    `json:"oldest_record_id"`
	OldestRecordAt time.Time `json:"oldest_record_created_at"`
}

type lateJSON struct {
	Rows   int64     `json:"rows"`
	LastAt time.Time `json:"last_at"`
}

type inFlightJSON struct {
	Records     int       `json:"records"`
	OldestSince time.Time `json:"oldest_since"`
}

// report is in in its JSON form.
func (in Info) report() infoJSON {
	r := infoJSON{Process: in.Process, State: in.Status, Partitions: in.Partitions, Paused: in.Paused,
		RecordsHandled: in.RecordsHandled, Throughput: in.Throughput, Locked: in.Locked, Holder: in.Holder,
		HolderPID: in.HolderPID, Epoch: in.Epoch, LeaseExpiresAt: timeOrNil(in.LeaseExpiresAt),
		Connected: in.Connected, Position: in.Position, Error: in.LagError, UpdatedAt: in.UpdatedAt}
	if r.State == "" {
		r.State = statusOf(in, in.Lag)
	}
	if h := in.Halt; h != nil {
		r.Halt = &haltJSON{RecordID: h.RecordID, Error: h.Error, Permanent: h.Permanent, Attempts: h.Attempts,
			FirstFailureAt: h.FirstFailureAt.UTC(), LastFailureAt: h.LastFailureAt.UTC(),
			NextAttemptAt: timeOrNil(h.NextAttemptAt), HaltedAt: timeOrNil(h.HaltedAt)}
		if h.Unavailable != "" {
			check := h.Unavailable
			r.Halt.Unavailable = &check
		}
		if h.Status != 0 {
			code := h.Status
			r.Halt.Status = &code
		}
	}
	if in.SourceWait != "" && in.Halt == nil {
		wait := in.SourceWait
		r.SourceWait = &wait
	}
	if !in.HeldSince.IsZero() {
		r.Hold = &holdJSON{WriterPID: in.HeldByPID, Since: in.HeldSince.UTC()}
	}
	if in.InFlight > 0 && (in.Locked || in.Connected > 0) {
		r.InFlight = &inFlightJSON{Records: in.InFlight, OldestSince: in.InFlightSince.UTC()}
	}
	if in.ParkedRecords > 0 && in.OldestParked != nil {
		r.Parked = &parkedJSON{Keys: in.ParkedKeys, Records: in.ParkedRecords, Since: in.ParkedSince.UTC(),
			AgeSeconds: max(0, time.Since(in.ParkedSince).Seconds()), OldestRecordID: in.OldestParked.ID,
			OldestRecordAt: in.OldestParked.CreatedAt.UTC()}
	}
	if in.LateRows > 0 {
		r.Late = &lateJSON{Rows: in.LateRows, LastAt: in.LateAt.UTC()}
	}
	if s := in.Source; s.Table != "" {
		r.Source = &sourceJSON{Table: s.Table, IDColumn: s.IDColumn, CreatedAtColumn: s.CreatedAtColumn,
			KeyColumn: s.KeyColumn, Tracking: string(s.Horizon), Where: s.Where}
		if pt := s.Partition; pt != nil {
			r.Source.Partition = &partitionJSON{Index: pt.Index, Count: pt.Count}
		}
	}
	if lag := in.Lag; lag != nil {
		r.Behind = &behindJSON{Rows: lag.Rows, Capped: lag.Capped, OldestCreatedAt: timeOrNil(lag.Oldest)}
		if !lag.Oldest.IsZero() {
			r.Behind.OldestAgeSeconds = lag.Now.Sub(lag.Oldest).Seconds()
		}
	}
	return r
}

// timeOrNil is t in UTC, or nil for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
