package store

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// CursorRow is one cursor row as status reads it, without disturbing the process.
type CursorRow struct {
	Name   string
	State  inordertype.State
	Source inordertype.Source
	// Partitions is set on the parent row of a partitioned process: how many partitions it has.
	Partitions int
	// HeldByPID and HeldSince say which backend holds the horizon back, and since when (zero when none).
	HeldByPID int
	HeldSince time.Time
	// SourceWait, when not empty, says that the stream waits for its source to fit again after a
	// migration, what it waits for and what to do (see Source.SetSourceWait).
	SourceWait string
	UpdatedAt  time.Time
	// RecordsHandled counts the records the process advanced past; Throughput is records per second
	// over roughly the last minute.
	RecordsHandled int64
	Throughput     float64
	InFlight       int
	InFlightSince  time.Time
	// Epoch, Owner, OwnerSince and LeaseExpiresAt are the lease; LeaseRuns says it has not run out, and
	// OwnerSession that the owner said it holds the process's lock on a direct session (see LockKey).
	Epoch          int64
	Owner          string
	OwnerSince     time.Time
	LeaseExpiresAt time.Time
	LeaseRuns      bool
	OwnerSession   bool
	// ParkedKeys and ParkedRecords count the keys parked in the stream and their records; ParkedSince is
	// when the longest parked was parked, and OldestParked the first parked record (nil when none).
	ParkedKeys    int
	ParkedRecords int
	ParkedSince   time.Time
	OldestParked  *inordertype.Position
	// LateRows counts the rows found committed behind the position after the process passed them, and
	// LateAt is when the last was found (zero when none ever was).
	LateRows int64
	LateAt   time.Time
}

// ListCursors reads every cursor row, or only process name's when name is not empty (with its
// partitions' rows when partitions is set), in name order.
func ListCursors(ctx context.Context, q Querier, name string, partitions bool) ([]CursorRow, error) {
	rows, err := q.Query(ctx, `
		SELECT `+effectiveStateColumns+`, process_name,
		       coalesce(source_table, ''), coalesce(source_id_column, ''), coalesce(source_created_at_column, ''),
		       coalesce(source_key_column, ''), coalesce(ss.horizon, ''), coalesce(ss.filter, ''),
		       source_partition, source_partitions, coalesce(partitions, 0),
		       held_by_pid, held_since, pos.updated_at, pos.records_handled, pos.in_flight, pos.in_flight_since,
		       (pos.records_handled - window_records)
		         / greatest(extract(epoch FROM clock_timestamp() - window_started_at), 1)::float8,
		       owner_epoch, coalesce(owner_instance, ''), owner_since, lease_expires_at,
		       coalesce(lease_expires_at > clock_timestamp(), false), owner_session,
		       pk.keys, pk.records, pk.since, pk.oldest_at, pk.oldest_id, coalesce(ss.late_rows, 0), ss.late_at, ss.wait
		FROM inorder.cursor LEFT JOIN inorder.source_state AS ss USING (process_name) LEFT JOIN LATERAL (
			SELECT count(DISTINCT key)::int AS keys, count(*)::int AS records, min(parked_at) AS since,
			       (array_agg(record_created_at ORDER BY seq))[1] AS oldest_at,
			       (array_agg(record_id ORDER BY seq))[1] AS oldest_id
			FROM inorder.parked WHERE parked.process_name = cursor.process_name) AS pk ON true
		`+joinPosition+`
		WHERE $1 = '' OR process_name = $1 OR ($2 AND `+partitionRow+`)
		ORDER BY process_name`, name, partitions)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (CursorRow, error) {
		var (
			c           CursorRow
			hsin, fsin  pgtype.Timestamptz
			flying      int32
			heldPID     pgtype.Int4
			part, parts pgtype.Int4
			since, exp  pgtype.Timestamptz
			pkKeys      pgtype.Int4
			pkRecords   pgtype.Int4
			pkSince     pgtype.Timestamptz
			oldestAt    pgtype.Timestamptz
			oldestID    pgtype.Text
			lateAt      pgtype.Timestamptz
			sourceWait  pgtype.Text
		)
		st, _, err := scanState(r, &c.Name,
			&c.Source.Table, &c.Source.IDColumn, &c.Source.CreatedAtColumn, &c.Source.KeyColumn, &c.Source.Horizon,
			&c.Source.Where, &part, &parts, &c.Partitions, &heldPID, &hsin, &c.UpdatedAt,
			&c.RecordsHandled, &flying, &fsin, &c.Throughput,
			&c.Epoch, &c.Owner, &since, &exp, &c.LeaseRuns, &c.OwnerSession,
			&pkKeys, &pkRecords, &pkSince, &oldestAt, &oldestID, &c.LateRows, &lateAt, &sourceWait)
		c.LateAt = lateAt.Time
		c.State, c.SourceWait = st, sourceWait.String
		c.InFlight, c.InFlightSince = int(flying), fsin.Time
		c.OwnerSince, c.LeaseExpiresAt = since.Time, exp.Time
		if part.Valid && parts.Valid {
			c.Source.Partition = &inordertype.Partition{Index: int(part.Int32), Count: int(parts.Int32)}
		}
		if heldPID.Valid {
			c.HeldByPID, c.HeldSince = int(heldPID.Int32), hsin.Time
		}
		c.ParkedKeys, c.ParkedRecords = int(pkKeys.Int32), int(pkRecords.Int32)
		if c.ParkedRecords > 0 {
			c.ParkedSince = pkSince.Time
			c.OldestParked = &inordertype.Position{CreatedAt: oldestAt.Time.UTC(), ID: oldestID.String}
		}
		return c, err
	})
}

// LiveInstances counts, by process, the instances whose row in the instances table is live: every
// running instance, owner or standby, renews its row at a third of its lease and removes it when it
// stops (see Repository).
func LiveInstances(ctx context.Context, q Querier) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT process_name, count(*)::int FROM inorder.instance
		WHERE seen_until > clock_timestamp() GROUP BY process_name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		live[name] = n
	}
	return live, rows.Err()
}
