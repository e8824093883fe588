package cursor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
	Head     string   `json:"head_record_id"`
	Position Position `json:"head_position"`
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
	streams, err := streamNames(ctx, tx, name)
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	// Each key's first record, the longest parked first.
	rows, err := tx.Query(ctx, `
		SELECT * FROM (
			SELECT DISTINCT ON (process_name, key) process_name, key,
			       count(*) OVER (PARTITION BY process_name, key)::int,
			       record_id, record_created_at, error, coalesce(status, 0), permanent, attempts, parked_at,
			       coalesce(last_failure_at, parked_at), redrive_at IS NOT NULL
			FROM inorder.parked WHERE process_name = ANY($1)
			ORDER BY process_name, key, seq) AS head
		ORDER BY parked_at, process_name, key`, streams)
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ParkedKey, error) {
		var k ParkedKey
		err := r.Scan(&k.Stream, &k.Key, &k.Records, &k.Head, &k.Position.CreatedAt, &k.Error, &k.Status,
			&k.Permanent, &k.Attempts, &k.Since, &k.LastFailureAt, &k.RedriveRequested)
		k.Position.ID, k.Position.CreatedAt = k.Head, k.Position.CreatedAt.UTC()
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("read parked keys of %q: %w", name, err)
	}
	return keys, nil
}

// streamNames returns the cursor rows of process name's streams: its own, or its partitions' (rows or not
// yet). A name that is no process's (a partition's own name) stands for itself.
func streamNames(ctx context.Context, tx pgx.Tx, name string) ([]string, error) {
	procs, err := ListProcesses(ctx, tx, name)
	if err != nil || len(procs) == 0 {
		return []string{name}, err
	}
	p := procs[0]
	names := append([]string{}, p.Unregistered...)
	for _, s := range p.Streams {
		names = append(names, s.Process)
	}
	return names, nil
}

// lockStreams locks the cursor rows of the streams (a partitioned process's partitions), waiting for their
// running batches to end, so that the parked records an action changes are every one a processor parked:
// a processor parks and redrives only while it holds its stream's row.
func lockStreams(ctx context.Context, tx pgx.Tx, streams []string) error {
	rows, err := tx.Query(ctx, `SELECT process_name FROM inorder.cursor WHERE process_name = ANY($1)
		ORDER BY process_name FOR UPDATE`, streams)
	if err == nil {
		_, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if isLockTimeout(err) {
		return fmt.Errorf("%w: a batch held a stream's cursor row for too long; try again or wait longer", ErrBusy)
	}
	return err
}

// RedriveOpts says which parked keys Redrive delivers: Key, or every key of the process with All.
type RedriveOpts struct {
	Key string
	All bool
}

// Redrive asks the processor that owns process name to deliver the records of a parked key (or of every
// parked key), in order, ahead of the key's new records, and then to unpark it; it acts within a probe
// interval, between two batches. A key whose first record still fails stays parked, with the new error.
// It refuses when nothing matching is parked (ErrNotParked). Audited, with the keys in the entry's detail.
func Redrive(ctx context.Context, db DB, name string, opts RedriveOpts, aopts ActionOpts) (AuditEntry, error) {
	if (opts.Key == "") == !opts.All {
		return AuditEntry{}, fmt.Errorf("redrive %q: name a key, or ask for all of them", name)
	}
	return act(ctx, db, name, "redrive", aopts, func(tx pgx.Tx, row cursorRow, e *AuditEntry) (*Position, error) {
		streams, err := streamNames(ctx, tx, name)
		if err == nil {
			err = lockStreams(ctx, tx, streams)
		}
		if err != nil {
			return nil, fmt.Errorf("redrive %q: %w", name, err)
		}
		rows, err := tx.Query(ctx, `
			WITH asked AS (
				UPDATE inorder.parked SET redrive_at = clock_timestamp()
				WHERE process_name = ANY($1) AND ($2 = '' OR key = $2)
				RETURNING process_name, key),
			woken AS (
				UPDATE inorder.cursor SET redrive_requested_at = clock_timestamp()
				WHERE process_name IN (SELECT process_name FROM asked))
			SELECT key, count(*)::int FROM asked GROUP BY key ORDER BY key`, streams, opts.Key)
		if err != nil {
			return nil, fmt.Errorf("redrive %q: %w", name, err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ParkedCount])
		if err != nil {
			return nil, fmt.Errorf("redrive %q: %w", name, err)
		}
		if len(keys) == 0 {
			what := "no key is parked"
			if opts.Key != "" {
				what = fmt.Sprintf("key %q is not parked", opts.Key)
			}
			return nil, fmt.Errorf("redrive %q: %w: %s", name, ErrNotParked, what)
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

// skipParked drops recordID, the first parked record of its key, in the skip's transaction, and asks the
// owning processor to redrive the rest of the key (or, when nothing is left, to unpark it). It reports
// false when no stream of the process has recordID parked.
func skipParked(ctx context.Context, tx pgx.Tx, name, recordID string, e *AuditEntry) (bool, error) {
	streams, err := streamNames(ctx, tx, name)
	if err == nil {
		err = lockStreams(ctx, tx, streams)
	}
	if err != nil {
		return false, err
	}
	var stream, key string
	var head bool
	var at time.Time
	err = tx.QueryRow(ctx, `
		SELECT p.process_name, p.key, p.record_created_at,
		       NOT EXISTS (SELECT 1 FROM inorder.parked q
		                   WHERE q.process_name = p.process_name AND q.key = p.key AND q.seq < p.seq)
		FROM inorder.parked p WHERE p.process_name = ANY($1) AND p.record_id = $2
		ORDER BY p.seq LIMIT 1
		FOR UPDATE`, streams, recordID).Scan(&stream, &key, &at, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !head {
		return true, fmt.Errorf("%w: record %s is parked behind the first record of key %q; skip that one, or redrive the key",
			ErrNotParked, recordID, key)
	}
	var left int
	if err := tx.QueryRow(ctx, `
		WITH gone AS (DELETE FROM inorder.parked
			WHERE process_name = $1 AND key = $2 AND record_created_at = $3 AND record_id = $4),
		rest AS (UPDATE inorder.parked SET redrive_at = clock_timestamp()
			WHERE process_name = $1 AND key = $2 AND NOT (record_created_at = $3 AND record_id = $4) RETURNING 1),
		woken AS (UPDATE inorder.cursor SET redrive_requested_at = clock_timestamp() WHERE process_name = $1)
		SELECT count(*)::int FROM rest`, stream, key, at, recordID).Scan(&left); err != nil {
		return true, err
	}
	pos := Position{CreatedAt: at.UTC(), ID: recordID}
	e.Detail = &AuditDetail{Keys: []ParkedCount{{Key: key, Records: left}}, Through: &pos}
	return true, nil
}

// parkedSummary is what List says of a stream's parked keys.
type parkedSummary struct {
	keys, records pgtype.Int4
	since         pgtype.Timestamptz
	oldestAt      pgtype.Timestamptz
	oldestID      pgtype.Text
}

// parkedColumns are the columns of List's read that parkedSummary scans, from the lateral join parkedJoin.
const (
	parkedColumns = `pk.keys, pk.records, pk.since, pk.oldest_at, pk.oldest_id`
	parkedJoin    = `LEFT JOIN LATERAL (
		SELECT count(DISTINCT key)::int AS keys, count(*)::int AS records, min(parked_at) AS since,
		       (array_agg(record_created_at ORDER BY seq))[1] AS oldest_at,
		       (array_agg(record_id ORDER BY seq))[1] AS oldest_id
		FROM inorder.parked WHERE parked.process_name = cursor.process_name) AS pk ON true`
)

func (s *parkedSummary) scan() []any {
	return []any{&s.keys, &s.records, &s.since, &s.oldestAt, &s.oldestID}
}

// fill sets in's parked fields.
func (s *parkedSummary) fill(in *Info) {
	in.ParkedKeys, in.ParkedRecords = int(s.keys.Int32), int(s.records.Int32)
	if in.ParkedRecords > 0 {
		in.ParkedSince = s.since.Time
		in.OldestParked = &Position{CreatedAt: s.oldestAt.Time.UTC(), ID: s.oldestID.String}
	}
}
