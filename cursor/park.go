package cursor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

var (
	// ErrNotParked: Redrive was asked for a key (or for every key) of a process that has none parked, or
	// Skip for a parked record that is not its key's first.
	ErrNotParked = errors.New("not parked")
	// ErrParked: Repartition or Forget was asked for a process with parked keys, whose records would be
	// lost with its streams; redrive or skip them first.
	ErrParked = errors.New("keys are parked")
)

// ParkedKey is a key parked in one stream of a process run with processor.OnHaltPark: its first record
// failed in a way that would have halted the stream, and every later record of the key waits behind it,
// in order, while the other keys go on. Nothing parked is skipped: Redrive delivers the records, Skip
// drops the first one (audited), and a prune keeps their rows.
type ParkedKey struct {
	// Stream is the cursor row the key is parked in: the process, or one of its partitions.
	Stream string `json:"stream"`
	Key    string `json:"key"`
	// Records counts the key's parked records, the first included.
	Records int `json:"records"`
	// Head is the key's first parked record, the one that failed; Position is where it lies.
	Head     string               `json:"head_record_id"`
	Position inordertype.Position `json:"head_position"`
	// Error is the head's last failure, with the sink's status code when it has one, whether the sink
	// refused it for good, and how many times it has failed.
	Error     string `json:"error"`
	Status    int    `json:"status,omitempty"`
	Permanent bool   `json:"permanent"`
	Attempts  int    `json:"attempts"`
	// Since is when the key was parked; LastFailureAt when its head last failed.
	Since         time.Time `json:"since"`
	LastFailureAt time.Time `json:"last_failure_at"`
	// RedriveRequested says an operator asked for a redrive that the owning processor has not done yet.
	RedriveRequested bool `json:"redrive_requested"`
}

// Parked lists the keys parked in process name's streams (its partitions' for a partitioned process),
// the longest parked first.
func Parked(ctx context.Context, db DB, name string) ([]ParkedKey, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	streams, err := store.StreamsOf(ctx, tx, name)
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	heads, err := store.ParkedHeads(ctx, tx, streams)
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	keys := make([]ParkedKey, len(heads))
	for i, h := range heads {
		keys[i] = ParkedKey{Stream: h.Stream, Key: h.Key, Records: h.Records, Head: h.Position.ID, Position: h.Position,
			Error: h.Error, Status: h.Status, Permanent: h.Permanent, Attempts: h.Attempts, Since: h.Since,
			LastFailureAt: h.LastFailureAt, RedriveRequested: h.RedriveRequested}
	}
	return keys, nil
}

// lockStreams locks the cursor rows of the streams (a partitioned process's partitions), waiting for their
// running batches to end (see store.LockStreams).
func lockStreams(ctx context.Context, tx pgx.Tx, streams []string) error {
	return busyStreams(store.LockStreams(ctx, tx, streams))
}

// busyStreams says ErrBusy for a lock on the streams' rows that stayed held for too long.
func busyStreams(err error) error {
	if isLockTimeout(err) {
		return fmt.Errorf("%w: a batch held a stream's cursor row for too long; try again or wait longer", ErrBusy)
	}
	return err
}

// RedriveOpts says which parked keys Redrive delivers, Key or every key of the process with All, and who
// asks and why.
type RedriveOpts struct {
	// ActionOpts names who redrives and why, for the audit; Actor is required.
	ActionOpts
	// Key is the parked key whose records are delivered; leave it empty with All.
	Key string
	// All redrives every parked key of the process, each in its own order; Key must then be empty.
	All bool
}

// Redrive asks the processor that owns process name to deliver the records of a parked key (or of every
// parked key), in order, ahead of the key's new records, and then to unpark it; it acts within a probe
// interval, between two batches. A key whose first record still fails stays parked, with the new error.
// It refuses when nothing matching is parked (ErrNotParked). Audited, with the keys in the entry's detail.
func Redrive(ctx context.Context, db DB, name string, opts RedriveOpts) (AuditEntry, error) {
	if (opts.Key == "") == !opts.All {
		return AuditEntry{}, fmt.Errorf("redrive %q: name a key, or ask for all of them", name)
	}
	return act(ctx, db, name, "redrive", opts.ActionOpts, func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*inordertype.Position, error) {
		streams := row.Streams()
		if err := lockStreams(ctx, tx, streams); err != nil {
			return nil, fmt.Errorf("redrive %q: %w", name, err)
		}
		asked, err := store.RequestRedrive(ctx, tx, streams, opts.Key)
		if err != nil {
			return nil, fmt.Errorf("redrive %q: %w", name, err)
		}
		if len(asked) == 0 {
			what := "no key is parked"
			if opts.Key != "" {
				what = fmt.Sprintf("key %q is not parked", opts.Key)
			}
			return nil, fmt.Errorf("redrive %q: %w: %s", name, ErrNotParked, what)
		}
		keys := make([]ParkedCount, len(asked))
		for i, k := range asked {
			keys[i] = ParkedCount(k)
		}
		e.Detail = &AuditDetail{Keys: keys}
		return nil, nil
	})
}

// ParkedCount is a parked key and how many of its records an action concerned.
type ParkedCount struct {
	Key     string `json:"key"`
	Records int    `json:"records"`
}
