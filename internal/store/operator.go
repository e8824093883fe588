package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The statements of the operator actions (package cursor): each reads what its action needs in one place
// and returns it typed. They run in the action's transaction, which the caller begins and commits.

// ActionRow is a process's cursor row as an operator action reads it, locked: its state, the source it
// last ran against (Table empty when it never ran) and, on the parent row of a partitioned process, how
// many partitions it has (0 otherwise).
type ActionRow struct {
	Name       string
	State      inordertype.State
	Source     inordertype.Source
	Partitions int
}

// Streams names the cursor rows the row's records are delivered under: its partitions' (whether they
// have a row yet or not) on the parent row of a partitioned process, else its own.
func (r ActionRow) Streams() []string {
	if r.Partitions == 0 {
		return []string{r.Name}
	}
	names := make([]string, r.Partitions)
	for i := range names {
		names[i] = PartitionName(r.Name, i, r.Partitions)
	}
	return names
}

// LockForAction locks and reads process name's cursor row for an operator action, waiting for a running
// batch within tx's lock_timeout. It reports false when there is no such row.
func LockForAction(ctx context.Context, tx pgx.Tx, name string) (ActionRow, bool, error) {
	row := ActionRow{Name: name}
	var part, parts, partitions *int32
	st, ok, err := scanState(tx.QueryRow(ctx, `
		SELECT `+effectiveStateColumns+`,
		       coalesce(source_table, ''), coalesce(source_id_column, ''), coalesce(source_created_at_column, ''),
		       coalesce(source_key_column, ''), coalesce(ss.horizon, ''), source_partition, source_partitions, partitions
		FROM inorder.cursor `+joinPosition+` LEFT JOIN inorder.source_state AS ss USING (process_name)
		WHERE process_name = $1 FOR UPDATE OF cursor`, name),
		&row.Source.Table, &row.Source.IDColumn, &row.Source.CreatedAtColumn, &row.Source.KeyColumn, &row.Source.Horizon, &part, &parts,
		&partitions)
	if err != nil || !ok {
		return row, ok, err
	}
	row.State = st
	if parts != nil && part != nil {
		row.Source.Partition = &inordertype.Partition{Index: int(*part), Count: int(*parts)}
	}
	if partitions != nil {
		row.Partitions = int(*partitions)
	}
	return row, true, nil
}

// StreamsOf names the cursor rows process name's records are delivered under, as ActionRow.Streams does,
// without locking anything: its own, or its partitions' when it is partitioned. A name without a row
// stands for itself.
func StreamsOf(ctx context.Context, q Querier, name string) ([]string, error) {
	var parts *int32
	err := q.QueryRow(ctx, "SELECT partitions FROM inorder.cursor WHERE process_name = $1", name).Scan(&parts)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	row := ActionRow{Name: name}
	if parts != nil {
		row.Partitions = int(*parts)
	}
	return row.Streams(), nil
}

// SetPaused pauses or resumes process name.
func SetPaused(ctx context.Context, tx pgx.Tx, name string, paused bool) error {
	_, err := tx.Exec(ctx, "UPDATE inorder.cursor SET paused = $2 WHERE process_name = $1", name, paused)
	return err
}

// RetryNow ends the backoff of the record process name fails on: its next attempt is due now.
func RetryNow(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `UPDATE inorder.cursor SET halted_next_attempt_at = clock_timestamp()
		WHERE process_name = $1`, name)
	return err
}

// MovePosition sets process name's position as an operator does (skip, rewind), clearing its halt state.
func MovePosition(ctx context.Context, tx pgx.Tx, name string, pos inordertype.Position) error {
	args := positionArgs(pos)
	_, err := tx.Exec(ctx, `
		UPDATE inorder.cursor SET position_created_at = $2, position_id = $3,
		       position_seq = nextval('inorder.checkpoint_seq'), `+clearHalt+`
		WHERE process_name = $1`, name, args[0], args[1])
	return err
}

// Audit is an entry of the audit trail as WriteAudit writes it: Before, After and Detail are stored as
// JSON, nil as NULL.
type Audit struct {
	Process, Action, Actor, Reason string
	// RecordID is the record acted on; empty for none.
	RecordID      string
	Before, After *inordertype.Position
	Detail        any
}

// AuditStamp is what the database adds to an entry it stores.
type AuditStamp struct {
	ID   int64
	At   time.Time
	Role string
}

// AuditRow is a stored entry of the audit trail, as ReadAudit reads it.
type AuditRow struct {
	Audit
	AuditStamp
	// Detail is the entry's detail as stored (JSON), nil when it has none; Audit.Detail is unset.
	Detail json.RawMessage
}

// jsonText is v as JSON text, or nil (NULL) when null. JSON text, not the values: in pgx's exec and
// simple-protocol modes (which a pooler in transaction mode needs) a parameter is encoded by its Go type
// alone, and a Position would go as its String.
func jsonText(v any, null bool) (any, error) {
	if null {
		return nil, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// WriteAudit stores a in the audit trail, in tx, and returns its id, time and database role.
func WriteAudit(ctx context.Context, tx pgx.Tx, a Audit) (AuditStamp, error) {
	var s AuditStamp
	var rec *string
	if a.RecordID != "" {
		rec = &a.RecordID
	}
	before, err := jsonText(a.Before, a.Before == nil)
	if err != nil {
		return s, err
	}
	after, err := jsonText(a.After, a.After == nil)
	if err != nil {
		return s, err
	}
	detail, err := jsonText(a.Detail, a.Detail == nil)
	if err != nil {
		return s, err
	}
	err = tx.QueryRow(ctx, `
		INSERT INTO inorder.audit (process_name, action, actor, reason, record_id, position_before, position_after, detail)
		VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, $8::text::jsonb)
		RETURNING id, at, db_role`, a.Process, a.Action, a.Actor, a.Reason, rec, before, after, detail).
		Scan(&s.ID, &s.At, &s.Role)
	return s, err
}

// SetAuditDetail replaces the detail of the entries ids (a prune bringing its entries up to date).
func SetAuditDetail(ctx context.Context, tx pgx.Tx, ids []int64, detail any) error {
	text, err := json.Marshal(detail) // JSON text: see jsonText
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "UPDATE inorder.audit SET detail = $2::text::jsonb WHERE id = ANY($1)", ids, string(text))
	return err
}

// ReadAudit reads the audit trail of process (every process's when empty), newest first, at most limit
// entries.
func ReadAudit(ctx context.Context, q Querier, process string, limit int) ([]AuditRow, error) {
	rows, err := q.Query(ctx, `
		SELECT id, at, process_name, action, db_role, actor, reason, coalesce(record_id, ''),
		       position_before, position_after, detail
		FROM inorder.audit WHERE $1 = '' OR process_name = $1
		ORDER BY id DESC LIMIT $2`, process, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRow, error) {
		var e AuditRow
		err := r.Scan(&e.ID, &e.At, &e.Process, &e.Action, &e.Role, &e.Actor, &e.Reason, &e.RecordID,
			&e.Before, &e.After, &e.Detail)
		return e, err
	})
}

// StreamRow is a stream's cursor row as Forget and Repartition lock it.
type StreamRow struct {
	Name     string
	Position inordertype.Position
	// Table is the source table it last ran against; empty when it never ran.
	Table string
}

// LockPartitions locks the cursor rows of process name's partitions, in name order, without waiting: a
// processor working one makes it fail with the lock_not_available error (55P03).
func LockPartitions(ctx context.Context, tx pgx.Tx, name string) ([]StreamRow, error) {
	rows, err := tx.Query(ctx, `SELECT `+effectiveStateColumns+`, process_name, coalesce(source_table, '')
		FROM inorder.cursor `+joinPosition+` WHERE `+partitionRow+`
		ORDER BY process_name FOR UPDATE OF cursor NOWAIT`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StreamRow, error) {
		var s StreamRow
		st, _, err := scanState(r, &s.Name, &s.Table)
		s.Position = st.Position
		return s, err
	})
}

// Resplit makes process name n partitions anew, every one, and the parent row, at position at: the rows
// of its former partitions are deleted.
func Resplit(ctx context.Context, tx pgx.Tx, name string, n int, at inordertype.Position) error {
	if _, err := tx.Exec(ctx, `DELETE FROM inorder.cursor WHERE `+partitionRow, name); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, dropOrphanSourceState); err != nil {
		return err
	}
	args := positionArgs(at)
	if _, err := tx.Exec(ctx, `
		INSERT INTO inorder.cursor (process_name, position_created_at, position_id)
		SELECT $1 || '#' || i || '/' || $2::int, $3::timestamptz, $4::text FROM generate_series(0, $2::int - 1) AS i`,
		name, n, args[0], args[1]); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE inorder.cursor SET partitions = $2, position_created_at = $3, position_id = $4,
		       position_seq = nextval('inorder.checkpoint_seq')
		WHERE process_name = $1`, name, n, args[0], args[1])
	return err
}

// IsPartitioned reports whether process name's cursor row is the parent row of a partitioned process.
func IsPartitioned(ctx context.Context, q Querier, name string) (bool, error) {
	var parts *int32
	err := q.QueryRow(ctx, "SELECT partitions FROM inorder.cursor WHERE process_name = $1", name).Scan(&parts)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return parts != nil, err
}

// withPartitions is the condition "the row is process $1's, or ($2) one of its partitions'".
const withPartitions = `(process_name = $1 OR ($2 AND ` + partitionRow + `))`

// LeasedOwner names a stream of process name (its partitions' too when partitioned) whose owner's lease
// runs and who holds no session lock (an owner through a pooler), with the owner and the lease's end, as
// "<stream> (owned by <instance> until <time>)"; false when there is none.
func LeasedOwner(ctx context.Context, tx pgx.Tx, name string, partitioned bool) (string, bool, error) {
	var leased string
	err := tx.QueryRow(ctx, `SELECT process_name || ' (owned by ' || coalesce(owner_instance, '?') || ' until ' ||
		       to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')'
		FROM inorder.cursor
		WHERE `+withPartitions+`
		  AND lease_expires_at > clock_timestamp() AND NOT owner_session
		ORDER BY process_name LIMIT 1`, name, partitioned).Scan(&leased)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return leased, err == nil, err
}

// DeleteCursors deletes process name's cursor row (its partitions' too when partitioned).
func DeleteCursors(ctx context.Context, tx pgx.Tx, name string, partitioned bool) error {
	if _, err := tx.Exec(ctx, `DELETE FROM inorder.cursor WHERE `+withPartitions, name, partitioned); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, dropOrphanSourceState)
	return err
}

// dropOrphanSourceState deletes what inorder.source_state keeps of processes whose cursor rows are gone, so
// that a process registered again under a forgotten one's name starts with nothing of it.
const dropOrphanSourceState = `DELETE FROM inorder.source_state AS s
	WHERE NOT EXISTS (SELECT 1 FROM inorder.cursor AS c WHERE c.process_name = s.process_name)`

// LiveInstance names an instance that says it runs process name (or, when partitioned, one of its
// partitions), as "<process> by <instance>"; false when none does.
func LiveInstance(ctx context.Context, tx pgx.Tx, name string, partitioned bool) (string, bool, error) {
	var who string
	err := tx.QueryRow(ctx, `SELECT process_name || ' by ' || instance FROM inorder.instance
		WHERE `+withPartitions+` AND seen_until > clock_timestamp()
		ORDER BY process_name, instance LIMIT 1`, name, partitioned).Scan(&who)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return who, err == nil, err
}

// DeleteInstances deletes the rows in which the instances of process name (of its partitions too when
// partitioned) said they run it.
func DeleteInstances(ctx context.Context, tx pgx.Tx, name string, partitioned bool) error {
	_, err := tx.Exec(ctx, `DELETE FROM inorder.instance WHERE `+withPartitions, name, partitioned)
	return err
}

// ReadPosition reads process name's position as the server has it now (an empty position when it has
// none yet).
func ReadPosition(ctx context.Context, q Querier, name string) (inordertype.Position, error) {
	var at pgtype.Timestamptz
	var id pgtype.Text
	if err := q.QueryRow(ctx, "SELECT position_created_at, position_id FROM inorder.position WHERE process_name = $1",
		name).Scan(&at, &id); err != nil {
		return inordertype.Position{}, err
	}
	if !at.Valid {
		return inordertype.Position{}, nil
	}
	return inordertype.Position{CreatedAt: at.Time.UTC(), ID: id.String}, nil
}

// ParkedHead is the first parked record of a key in a stream, with the key's count.
type ParkedHead struct {
	Stream, Key string
	// Records counts the key's parked records, the first included.
	Records  int
	Position inordertype.Position
	Error    string
	Status   int
	// Permanent and Attempts are the head's; Since is when the key was parked, LastFailureAt when its
	// head last failed.
	Permanent        bool
	Attempts         int
	Since            time.Time
	LastFailureAt    time.Time
	RedriveRequested bool
}

// ParkedHeads reads the first parked record of every key parked in streams, the longest parked first.
func ParkedHeads(ctx context.Context, q Querier, streams []string) ([]ParkedHead, error) {
	rows, err := q.Query(ctx, `
		SELECT * FROM (
			SELECT DISTINCT ON (process_name, key) process_name, key,
			       count(*) OVER (PARTITION BY process_name, key)::int,
			       record_id, record_created_at, error, coalesce(status, 0), permanent, attempts, parked_at,
			       coalesce(last_failure_at, parked_at), redrive_at IS NOT NULL
			FROM inorder.parked WHERE process_name = ANY($1)
			ORDER BY process_name, key, seq) AS head
		ORDER BY parked_at, process_name, key`, streams)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ParkedHead, error) {
		var k ParkedHead
		err := r.Scan(&k.Stream, &k.Key, &k.Records, &k.Position.ID, &k.Position.CreatedAt, &k.Error, &k.Status,
			&k.Permanent, &k.Attempts, &k.Since, &k.LastFailureAt, &k.RedriveRequested)
		k.Position.CreatedAt = k.Position.CreatedAt.UTC()
		return k, err
	})
}

// LockStreams locks the cursor rows of streams in name order, waiting for their running batches to end
// within tx's lock_timeout, so that the parked records an action changes are every one a processor
// parked: a processor parks and redrives only while it holds its stream's row.
func LockStreams(ctx context.Context, tx pgx.Tx, streams []string) error {
	rows, err := tx.Query(ctx, `SELECT process_name FROM inorder.cursor WHERE process_name = ANY($1)
		ORDER BY process_name FOR UPDATE`, streams)
	if err == nil {
		_, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	return err
}

// KeyCount is a parked key and how many of its records an action concerned.
type KeyCount struct {
	Key     string
	Records int
}

// RequestRedrive asks the processors of streams to redrive key (every key when empty) and returns the
// keys asked for, with their records, by key; none when nothing matching is parked.
func RequestRedrive(ctx context.Context, tx pgx.Tx, streams []string, key string) ([]KeyCount, error) {
	rows, err := tx.Query(ctx, `
		WITH asked AS (
			UPDATE inorder.parked SET redrive_at = clock_timestamp()
			WHERE process_name = ANY($1) AND ($2 = '' OR key = $2)
			RETURNING process_name, key),
		woken AS (
			UPDATE inorder.cursor SET redrive_requested_at = clock_timestamp()
			WHERE process_name IN (SELECT process_name FROM asked))
		SELECT key, count(*)::int FROM asked GROUP BY key ORDER BY key`, streams, key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[KeyCount])
}

// ParkedRecord is a parked record as FindParked finds it.
type ParkedRecord struct {
	Stream, Key string
	Position    inordertype.Position
	// Head says it is its key's first parked record.
	Head bool
}

// FindParked locks streams (see LockStreams) and finds recordID among their parked records, locked; false
// when none of them has it parked.
func FindParked(ctx context.Context, tx pgx.Tx, streams []string, recordID string) (ParkedRecord, bool, error) {
	if err := LockStreams(ctx, tx, streams); err != nil {
		return ParkedRecord{}, false, err
	}
	p := ParkedRecord{Position: inordertype.Position{ID: recordID}}
	err := tx.QueryRow(ctx, `
		SELECT p.process_name, p.key, p.record_created_at,
		       NOT EXISTS (SELECT 1 FROM inorder.parked q
		                   WHERE q.process_name = p.process_name AND q.key = p.key AND q.seq < p.seq)
		FROM inorder.parked p WHERE p.process_name = ANY($1) AND p.record_id = $2
		ORDER BY p.seq LIMIT 1
		FOR UPDATE`, streams, recordID).Scan(&p.Stream, &p.Key, &p.Position.CreatedAt, &p.Head)
	if errors.Is(err, pgx.ErrNoRows) {
		return ParkedRecord{}, false, nil
	}
	if err != nil {
		return ParkedRecord{}, false, err
	}
	p.Position.CreatedAt = p.Position.CreatedAt.UTC()
	return p, true, nil
}

// DropParkedHead deletes p, the first parked record of its key, and asks the stream's processor to
// redrive the rest of the key (or, when nothing is left, to unpark it). It returns how many records of
// the key are left.
func DropParkedHead(ctx context.Context, tx pgx.Tx, p ParkedRecord) (int, error) {
	var left int
	err := tx.QueryRow(ctx, `
		WITH gone AS (DELETE FROM inorder.parked
			WHERE process_name = $1 AND key = $2 AND record_created_at = $3 AND record_id = $4),
		rest AS (UPDATE inorder.parked SET redrive_at = clock_timestamp()
			WHERE process_name = $1 AND key = $2 AND NOT (record_created_at = $3 AND record_id = $4) RETURNING 1),
		woken AS (UPDATE inorder.cursor SET redrive_requested_at = clock_timestamp() WHERE process_name = $1)
		SELECT count(*)::int FROM rest`, p.Stream, p.Key, p.Position.CreatedAt, p.Position.ID).Scan(&left)
	return left, err
}

// CountParked counts the keys parked in streams and their records.
func CountParked(ctx context.Context, q Querier, streams []string) (keys, records int, err error) {
	err = q.QueryRow(ctx, `SELECT count(DISTINCT (process_name, key))::int, count(*)::int FROM inorder.parked
		WHERE process_name = ANY($1)`, streams).Scan(&keys, &records)
	return keys, records, err
}

// ErrCannotPark says that the role may not write the parked table, which a stream that parks needs.
var ErrCannotPark = errors.New("--on-halt park needs SELECT, INSERT, UPDATE, DELETE on inorder.parked for " +
	"this role: GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.parked TO <role>")

// CannotReadParked says that the role may not read the parked table, so that keys parked by another
// instance are not honoured.
const CannotReadParked = "this role may not read inorder.parked, so keys parked by another instance are not " +
	"honoured here: GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.parked TO <role>"
