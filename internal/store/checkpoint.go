// The checkpoint log (migration 13): how a position is recorded without rewriting the cursor row for every
// record.
//
// Why.
//
// Postgres keeps every version of a row that some snapshot might still need. While one old snapshot is
// held (a pg_dump, a report in REPEATABLE READ, a session idle in transaction, a standby's feedback, a
// prepared transaction), vacuum may remove no version newer than it, anywhere in the database. A cursor row
// rewritten for every record then becomes a chain of one version per record, and every lock, update and
// lookup of the row walks it: measured, a drain fell to 0.015 of its speed within four minutes of a held
// snapshot. Nothing here may cost more with a snapshot held than without one.
//
// How.
//
// A position is appended as an entry of inorder.checkpoint, by one INSERT that checks the owner's token in
// the same statement (the fence), in the transaction that holds the row lock. Entries are never updated or
// deleted one by one: the newest is found by a backward scan of (process_name, seq) that stops at the
// first entry, however many precede it, and the table's three partitions (slots) are emptied by TRUNCATE
// in turn, each once none of its entries is any process's newest. A row lock on an unchanged row writes no
// new version, so the cursor row is rewritten only for ownership and the lease (once per third of it), for
// a failing record, and by operators: a number of versions that grows with time, not records.
//
// A process's position is the newest of its cursor row's own (numbered position_seq) and its entries
// numbered above it (the view inorder.position). Every writer of a position holds the row lock and takes
// its number from one sequence, so numbers follow the order of the writes: an operator's skip or rewind
// writes the row with a new number, which outranks every entry before it.
//
// Rotation.
//
// The database's clock names the current slot (inorder.checkpoint_slot()), a new one every rotationPeriod in
// turn, and an entry goes into the slot that was current when its transaction locked the row, inserted into
// that partition itself (see appendSlot): an owner moves on with the clock, with no write of its row. The other two slots are emptied by the prober of each instance (see Prober.rotate),
// each in a short transaction of its own that takes the partition's lock with NOWAIT, folds the newest
// entries of processes nobody is working (SKIP LOCKED) into their rows, and truncates it only when no entry
// in it is any process's newest: the previous slot as soon as its owners have appended in the current one,
// the one before that in any case. NOWAIT means that it never waits and nothing ever queues behind it: a
// long transaction that read a table makes it try again at its next step. Correctness never depends on a
// truncation happening: only space does.
//
// A pg_dump holds every table it dumps for as long as it runs, so none of the three slots could be
// emptied meanwhile and the log would grow by an entry per record (about 169 bytes) until it ends. But it
// holds only the tables that existed when it started: the rotation then attaches partitions of its own
// and makes them current in the clock's place, in turns, and empties them as usual while the dump runs;
// once it ends the clock names the slot again and those partitions are dropped (see turn.go).

package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
)

// CheckpointTables is how many slots (partitions of inorder.checkpoint) take turns: the current one, the
// previous one (whose entries the current one's supersede as its owners append), and the one emptied for
// the next turn.
const CheckpointTables = 3

// rotationPeriod is how long the database's clock names one slot current, as inorder.checkpoint_slot()
// (migration 13) says: the tables hold about one to two periods of entries, at 1,000 records a second
// 10,000 to 20,000, 1.5 to 3 MB. Shorter would truncate more often, and each truncation rewrites catalog
// rows, which a held snapshot keeps too.
const rotationPeriod = 10 * time.Second

// checkpointTable names checkpoint table i, the partition of inorder.checkpoint for slot i.
func checkpointTable(i int) string { return fmt.Sprintf("inorder.checkpoint_%d", i) }

// effectiveStateColumns are stateColumns with the position as it stands (from the view inorder.position,
// joined as pos: see joinPosition).
const effectiveStateColumns = "pos.position_created_at, pos.position_id, " + haltColumns

// joinPosition joins the view inorder.position (each process's position as it stands: the newest of its
// cursor row's and its checkpoint entries) as pos, to a statement on inorder.cursor.
const joinPosition = "JOIN inorder.position AS pos USING (process_name)"

// foldSet is the SET list of a fold: the cursor row takes its position as it stands (inorder.position, joined
// as p), keeping the newest entry's number, so that the row alone says where the process stands and the
// position does not move.
const foldSet = `(position_created_at, position_id, position_seq, records_handled, in_flight, in_flight_since, updated_at) =
	(p.position_created_at, p.position_id, p.position_seq, p.records_handled, p.in_flight, p.in_flight_since,
	 p.updated_at)`

// checkpoint is a process's position as the checkpoint log records it: the position, the records handled
// so far (as the cursor row counts them) and what a keyed window has in flight.
type checkpoint struct {
	Position inordertype.Position
	Handled  int64
	InFlight InFlight
}

// same reports whether c and o record the same thing.
func (c checkpoint) same(o checkpoint) bool {
	return c.Position.CreatedAt.Equal(o.Position.CreatedAt) && c.Position.ID == o.Position.ID &&
		c.Handled == o.Handled && c.InFlight.Records == o.InFlight.Records &&
		c.InFlight.Since.Equal(o.InFlight.Since)
}

// recorded is what a cursor transaction has recorded of the process's checkpoint: the checkpoint and the
// row's position_seq.
type recorded struct {
	cp     checkpoint
	rowSeq int64
	// turn is the slot of the turn's partition (3 up) that holds the checkpoint's entry, 0 when the entry
	// is in one of the clock's or the row holds the checkpoint; sent is when the entry's statement was
	// sent (see appendSlot).
	turn int
	sent time.Time
}

// appendColumns are the columns an entry is appended with, after its slot: $1 the process, $2 and $3 the
// position, $4 the records handled, $5 and $6 what is in flight; the statements below take them from
// the cursor row's WHERE clause, under the owner's token $7 only.
const appendColumns = `process_name, position_created_at, position_id, records_handled, in_flight, in_flight_since`

// appendFenced is the end of an append: the values under the fence, and the answer. It fails (a division
// by zero, SQLSTATE 22012) when the fence refuses, which aborts the transaction, with whatever a
// transactional handler wrote in it, rather than let the COMMIT pipelined behind it keep that without
// the position; else it answers the slot the entry went into.
const appendFenced = `$1, $2, $3, $4, $5, $6 FROM inorder.cursor WHERE process_name = $1 AND owner_token = $7
	RETURNING slot)
	SELECT 1 / count(*)::int, max(slot) FROM appended`

// appendSQL appends a checkpoint entry through the parent, which routes it into the slot current when it
// is inserted (the column's default, inorder.checkpoint_slot()). The function is planned anew at every
// execution of the statement, and the routing opens the partition anew: together about five times the
// cost of an insert into the partition itself, so this is only for an entry whose slot is not known
// safe to name (see appendSlot).
const appendSQL = `WITH appended AS (
	INSERT INTO inorder.checkpoint (` + appendColumns + `)
	SELECT ` + appendFenced

// maxSlots is how many partitions inorder.checkpoint may have (inorder.checkpoint_new_turn() refuses past
// it), so the slots a lock may name.
const maxSlots = 16

// appendIntoSQL appends a checkpoint entry into slot i's partition itself, with no routing and no
// function call: one prepared statement per partition.
var appendIntoSQL = func() (out [maxSlots]string) {
	for i := range out {
		table := pgx.Identifier{"inorder", "checkpoint_" + strconv.Itoa(i)}.Sanitize()
		out[i] = `WITH appended AS (
	INSERT INTO ` + table + ` (slot, ` + appendColumns + `)
	SELECT ` + strconv.Itoa(i) + `::smallint, ` + appendFenced
	}
	return out
}()

// slotColumn is the last column of the lock statement: the slot current as the transaction locks the
// row, as inorder.checkpoint_slot() (migration 13) names it, written out rather than called (see
// appendSQL). It reads the sequence of the turns, which adds no row version for a held snapshot to keep.
// It says where the transaction's entry goes, which decides how soon a slot can be emptied, never a
// position (see appendSlot).
const slotColumn = `(SELECT CASE WHEN t.is_called AND to_regclass('inorder.checkpoint_' || t.last_value) IS NOT NULL
	                    THEN t.last_value ELSE floor(extract(epoch FROM clock_timestamp()) / 10)::bigint % 3 END
	        FROM inorder.checkpoint_turn AS t)`

// appendSlot returns the slot whose partition the open transaction's entry is appended into directly, or
// -1 when the parent must route it.
//
// An entry may go into any slot without harm to a position: a process's position is its newest entry,
// wherever it is, and the rotation empties a slot only when none of its entries is any process's newest.
// What must hold is that the partition exists when the entry is inserted. The clock's three always do,
// so the slot the lock named goes direct when it is one of them (one handler call late at most: the
// previous slot is then emptied a moment later). A partition of a turn is dropped once it is empty, which
// it may be between the lock and the append, so it goes direct only when it holds this process's newest
// entry, which keeps it from being emptied, and so dropped, for as long as the transaction holds the row:
// only a fold of the row lets the rotation empty it, and the rotation folds no row that is locked, nor
// the row of a process that appended within a rotation period (hence the time since the entry was sent),
// and a fold before the lock changes the row's number, after which the lock takes nothing it knew as
// durable (see scanLock). The first entry after a turn goes through the parent, which says where it
// went.
func (r *Position) appendSlot() int {
	s := r.slot
	switch {
	case s >= 0 && s < CheckpointTables:
		return s
	case s < maxSlots && s == r.durable.turn && r.lockedAt.Sub(r.durable.sent) < rotationPeriod/2:
		return s
	}
	return -1
}

// windowSet is the SET list that starts a new throughput window, once a minute, with the records handled so
// far as the row counts them (status tells the throughput of the last minute from it): a row rewritten
// for the lease or a position carries it.
// The cursor row must be named c.
const windowSet = `window_records = CASE WHEN clock_timestamp() - c.window_started_at >= interval '1 minute'
	                          THEN c.records_handled ELSE c.window_records END,
	    window_started_at = CASE WHEN clock_timestamp() - c.window_started_at >= interval '1 minute'
	                             THEN clock_timestamp() ELSE c.window_started_at END`

// foldPositionSQL writes the owner's checkpoint into its cursor row, numbered anew, clears the halt state,
// renews the lease ($7) and starts a new throughput window once a minute; under the owner's token ($8)
// only, failing (SQLSTATE 22012) when the fence refuses. It returns the row's new number.
const foldPositionSQL = `WITH moved AS (
	UPDATE inorder.cursor AS c
	SET position_created_at = $2, position_id = $3, position_seq = nextval('inorder.checkpoint_seq'),
	    ` + clearHalt + `,
	    updated_at = clock_timestamp(),
	    in_flight = $5, in_flight_since = $6, ` + windowSet + `,
	    records_handled = $4,
	    lease_expires_at = clock_timestamp() + $7::interval
	WHERE process_name = $1 AND owner_token = $8
	RETURNING position_seq)
	SELECT 1 / count(*)::int, max(position_seq) FROM moved`

// readCheckpointSQL reads process $1's checkpoint as it stands, in the transaction that holds its row.
const readCheckpointSQL = `SELECT position_created_at, position_id, records_handled, in_flight, in_flight_since
	FROM inorder.position WHERE process_name = $1`

// RotateApplicationName names a step of the rotation's transaction (SET LOCAL), in pg_stat_activity and to
// whatever audits the writes of cursor rows: its folds copy a position, and never move one.
const RotateApplicationName = "inorder:rotate"

// RotateResult says what one step of the rotation did with one slot.
type RotateResult struct {
	// Table is the slot (the partition of inorder.checkpoint) the step looked at.
	Table int
	// Truncated says that it was emptied; Folded counts the processes nobody was working whose newest
	// entry it copied into their cursor rows first.
	Truncated bool
	Folded    int
	// Busy says that the table was in use (a pg_dump holds every table it dumps; a long transaction may
	// have read it), and Waiting names a process whose newest entry is still in it: the next step tries
	// again.
	Busy    bool
	Waiting string
}

// RotateCheckpoints takes one step of the rotation on conn (see the package documentation of this file):
// of the slots not current, it empties those that hold entries of which none is any process's newest,
// each in a short transaction of its own, drops the partitions of turns no longer needed, and then moves
// the turn on when a pg_dump holds the current slot (see turn.go). While the clock names the slot, the one
// that becomes current next comes first, and its processes nobody is working have their newest entries
// folded into their rows; the previous one is emptied only once every owner has moved on from it, which
// the next step tries again. It never waits for a lock: a table in use is left for the next step.
func RotateCheckpoints(ctx context.Context, conn *pgx.Conn) ([]RotateResult, error) {
	return rotateCheckpoints(ctx, conn, freshTurnSize)
}

// rotateCheckpoints is RotateCheckpoints with the size past which a held current slot gives way to a
// fresh turn (freshTurnSize, smaller in tests).
func rotateCheckpoints(ctx context.Context, conn *pgx.Conn, freshAt int64) ([]RotateResult, error) {
	// The cheap look first, with no lock wanted: most steps find nothing to do.
	st, err := readRotation(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("rotate checkpoints: %w", err)
	}
	var out []RotateResult
	for _, step := range st.steps() {
		res, err := rotateSlot(ctx, conn, step.slot, step.fold)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	if err := dropTurns(ctx, conn, st, out); err != nil {
		return out, err
	}
	if st.nextTurn(freshAt) == (turnAction{}) {
		return out, nil // the usual case: no turn wanted, and no transaction for it
	}
	return out, takeTurn(ctx, conn, freshAt)
}

// foldMode says which processes' newest entries a step of the rotation folds into their cursor rows before
// it empties a slot: a fold writes a version of the row, so it is done only where it lets the slot be
// emptied in time.
type foldMode int

const (
	// foldNone folds nothing: the slot is the previous one, which its owners are about to leave.
	foldNone foldMode = iota
	// foldAll folds the newest entries of every process nobody is working: the slot becomes current next.
	foldAll
	// foldIdle folds those of processes nobody is working that have appended nothing for a rotation period:
	// a slot that turns, not the clock, took out of use, which owners that are still delivering leave by
	// themselves.
	foldIdle
)

// rotateSlot empties slot, when none of its entries is any process's newest, in a transaction of its own,
// folding first (as fold says) the newest entries of processes nobody is working.
func rotateSlot(ctx context.Context, conn *pgx.Conn, slot int, fold foldMode) (RotateResult, error) {
	res := RotateResult{Table: slot}
	table := checkpointTable(slot)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Say that this transaction inserts into no source table, so that no processor's horizon waits for it,
		// and name it for whoever reads pg_stat_activity.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1), set_config('application_name', $2, true)",
			NoInsertLockKey, RotateApplicationName); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE NOWAIT"); err != nil {
			return err
		}
		// Nothing can append to the table now.
		// A process's newest entry is in the table when the position as it stands carries its number and its
		// row does not hold it yet.
		newest := `EXISTS (SELECT 1 FROM inorder.position AS p JOIN ` + table + ` AS e
			ON e.process_name = p.process_name AND e.seq = p.position_seq
			WHERE p.process_name = c.process_name AND e.seq > c.position_seq)`
		if fold != foldNone {
			idle := ""
			if fold == foldIdle { // only a newest entry appended a rotation period ago or more
				idle = fmt.Sprintf(`AND (SELECT p.updated_at FROM inorder.position AS p WHERE p.process_name = c.process_name)
					<= clock_timestamp() - interval '%d milliseconds'`, rotationPeriod.Milliseconds())
			}
			tag, err := tx.Exec(ctx, `
				WITH idle AS (SELECT c.process_name FROM inorder.cursor AS c WHERE `+newest+` `+idle+`
					FOR UPDATE OF c SKIP LOCKED)
				UPDATE inorder.cursor AS c SET `+foldSet+`
				FROM idle, inorder.position AS p
				WHERE c.process_name = idle.process_name AND p.process_name = c.process_name`)
			if err != nil {
				return err
			}
			res.Folded = int(tag.RowsAffected())
		}
		err := tx.QueryRow(ctx, `SELECT c.process_name FROM inorder.cursor AS c WHERE `+newest+`
			ORDER BY c.process_name LIMIT 1`).Scan(&res.Waiting)
		if err == nil {
			return nil // an owner has not moved on yet: keep the folds, try again later
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if _, err := tx.Exec(ctx, "TRUNCATE "+table); err != nil {
			return err
		}
		res.Truncated = true
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return RotateResult{Table: slot, Busy: true}, nil
	}
	if err != nil {
		return RotateResult{Table: slot}, fmt.Errorf("rotate checkpoints: %w", err)
	}
	return res, nil
}
