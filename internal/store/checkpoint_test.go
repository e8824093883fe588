package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/migrations"
)

// countRowWrites makes the database count every rewrite of inorder.cursor's rows (a new row version each)
// from now on, and returns a function that reads the count.
func countRowWrites(t *testing.T, db *pgtest.DB) func() int {
	t.Helper()
	db.Exec(t, `CREATE TABLE row_writes (n int NOT NULL);
		INSERT INTO row_writes VALUES (0);
		CREATE FUNCTION count_row_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE row_writes SET n = n + 1; RETURN NULL; END $$;
		CREATE TRIGGER count_row_write AFTER UPDATE ON inorder.cursor FOR EACH ROW EXECUTE FUNCTION count_row_write()`)
	return func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT n FROM row_writes").Scan(&n))
		return n
	}
}

// base is the time the tests' positions count from.
var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// openOrders opens process "orders" with a lease no renewal falls due in during a test, and releases it
// when the test ends.
func openOrders(t *testing.T, cfg store.Config) *store.Repository {
	t.Helper()
	ctx := context.Background()
	cfg.Lease = time.Minute
	repo, err := store.New(nil).Open(ctx, "orders", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = repo.Release(ctx) })
	return repo
}

// checkpoints locks repo's row when it is not locked, and commits the positions of records from to to,
// one by one, a millisecond apart, each as a checkpoint per record does; it returns the last.
func checkpoints(t *testing.T, repo *store.Repository, from, to int) inordertype.Position {
	t.Helper()
	ctx := context.Background()
	if !repo.Lock.Locked() {
		ok, err := repo.Lock.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	var pos inordertype.Position
	for i := from; i <= to; i++ {
		pos = inordertype.Position{CreatedAt: base.Add(time.Duration(i) * time.Millisecond), ID: fmt.Sprint(i)}
		ok, err := repo.Lock.Checkpoint(ctx, pos, 1, store.InFlight{})
		require.NoError(t, err)
		require.True(t, ok)
	}
	return pos
}

// TestAPositionPerRecordAppendsAndRewritesTheRowOnlyForTheLease: a position committed per record is an
// entry appended to the checkpoint log, not a new version of the cursor row. The row is rewritten when the
// process is taken, and then only as often as the lease is renewed, however many records pass; and the
// position as it stands (cursor.Read's, status's) is the newest entry.
func TestAPositionPerRecordAppendsAndRewritesTheRowOnlyForTheLease(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	writes := countRowWrites(t, db)
	repo := openOrders(t, cfg)
	checkpoints(t, repo, 0, 0) // taking the process rewrites the row
	taken := writes()
	const records = 300
	pos := checkpoints(t, repo, 1, records)
	require.LessOrEqual(t, writes()-taken, 0, "%d positions rewrote the cursor row %d times", records, writes()-taken)
	read, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, pos, read, "the position as it stands is the newest entry")
	rows, err := store.ListCursors(ctx, db.Pool, "orders", false)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, pos, rows[0].State.Position)
	require.EqualValues(t, records+1, rows[0].RecordsHandled)

	// A clean stop leaves the position in the row itself, for whatever reads only the row.
	require.NoError(t, repo.Lock.Unlock(ctx))
	require.NoError(t, repo.Release(ctx))
	var at time.Time
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT position_created_at, position_id FROM inorder.cursor WHERE process_name = 'orders'").
		Scan(&at, &id))
	require.Equal(t, pos, inordertype.Position{CreatedAt: at.UTC(), ID: id})
}

// TestAHeldSnapshotCostsTheBookkeepingNothing: with a REPEATABLE READ snapshot held (vacuum may then
// remove no row version newer than it), two thousand positions committed one by one leave inorder.cursor
// as small as it was: nothing piles up in the row that every lock reads.
func TestAHeldSnapshotCostsTheBookkeepingNothing(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	repo := openOrders(t, cfg)
	size := func() int64 {
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_relation_size('inorder.cursor')").Scan(&n))
		return n
	}
	held, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer held.Rollback(ctx) //nolint:errcheck
	var n int
	require.NoError(t, held.QueryRow(ctx, "SELECT count(*) FROM inorder.cursor").Scan(&n))
	before := size()
	checkpoints(t, repo, 1, 2000)
	require.LessOrEqual(t, size(), before+8192, "inorder.cursor grew from %d to %d bytes under a held snapshot", before, size())
}

// TestAnOperatorsPositionOutranksEveryEntryBeforeIt: a rewind (or a skip) writes the row with a new number,
// so the position as it stands is the operator's even though the log holds newer-looking entries; and a
// position written into the row by anything else (the version before, hand-written SQL) is numbered by the
// database and wins the same way.
func TestAnOperatorsPositionOutranksEveryEntryBeforeIt(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	repo := openOrders(t, cfg)
	checkpoints(t, repo, 1, 5)
	require.NoError(t, repo.Lock.Unlock(ctx))

	rewound := inordertype.Position{CreatedAt: base.Add(2 * time.Millisecond), ID: "2"}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	row, found, err := store.LockForAction(ctx, tx, "orders")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "5", row.State.Position.ID, "the action reads the position as it stands")
	require.NoError(t, store.MovePosition(ctx, tx, "orders", rewound))
	require.NoError(t, tx.Commit(ctx))
	read, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, rewound, read)

	// The owner sees the operator's position at its next lock, and appends after it.
	ok, err := repo.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rewound, repo.Position.State().Position)
	next := checkpoints(t, repo, 3, 3)
	require.NoError(t, repo.Lock.Unlock(ctx))
	read, err = store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, next, read)

	// Hand-written SQL, as an instance of the version before writes it.
	db.Exec(t, "UPDATE inorder.cursor SET position_created_at = '2026-01-02T03:04:05.001Z', position_id = '1' WHERE process_name = 'orders'")
	read, err = store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, inordertype.Position{CreatedAt: base.Add(time.Millisecond), ID: "1"}, read)
}

// TestTheRotationEmptiesATableOnlyWhenNothingInItIsCurrent drives the rotation's steps by hand: a table
// holding the newest entry of a process nobody works is folded into that process's row first, then
// emptied; one holding the newest entry of a process whose row is locked (an owner in its batch) is kept;
// and a table in use elsewhere (a pg_dump holds every table it dumps) is left at once, never waited for.
func TestTheRotationEmptiesATableOnlyWhenNothingInItIsCurrent(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	db.Exec(t, `INSERT INTO inorder.cursor (process_name) VALUES ('idle'), ('busy')`)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// Whichever table the rotation empties next, each process's newest entry is there.
	next := (currentSlot(t, conn) + 1) % 3
	table := fmt.Sprintf("inorder.checkpoint_%d", next)
	db.Exec(t, `INSERT INTO inorder.checkpoint (slot, process_name, position_created_at, position_id, records_handled)
		VALUES ($1, 'idle', '2026-01-02T00:00:00Z', '7', 7), ($1, 'busy', '2026-01-02T00:00:00Z', '9', 9)`, next)

	busy, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = busy.Exec(ctx, "SELECT 1 FROM inorder.cursor WHERE process_name = 'busy' FOR UPDATE")
	require.NoError(t, err)
	res := rotated(t, conn, next)
	require.False(t, res.Truncated, "the busy process's newest entry is in the table")
	require.Equal(t, "busy", res.Waiting)
	require.Equal(t, 1, res.Folded, "the idle process's entry went into its row")
	for name, id := range map[string]string{"idle": "7", "busy": "9"} {
		pos, err := store.ReadPosition(ctx, db.Pool, name)
		require.NoError(t, err)
		require.Equal(t, id, pos.ID, name)
	}
	require.NoError(t, busy.Rollback(ctx))

	// A reader elsewhere holds the table: the step does not wait for it.
	reader, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = reader.Exec(ctx, "SELECT count(*) FROM "+table)
	require.NoError(t, err)
	stepCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res = rotatedCtx(t, stepCtx, conn, next)
	cancel()
	require.True(t, res.Busy)
	require.False(t, res.Truncated)
	require.NoError(t, reader.Rollback(ctx))

	res = rotated(t, conn, next)
	require.True(t, res.Truncated, "%+v", res)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&left))
	require.Zero(t, left)
	for name, id := range map[string]string{"idle": "7", "busy": "9"} {
		pos, err := store.ReadPosition(ctx, db.Pool, name)
		require.NoError(t, err)
		require.Equal(t, id, pos.ID, "%s's position survives the table's emptying", name)
	}
}

// TestThePreviousSlotIsEmptiedOnceItsOwnersMovedOn: the slot before the current one is emptied, with no
// fold, as soon as every process whose entries it holds has a newer one in the current slot; until then it
// is kept whole.
func TestThePreviousSlotIsEmptiedOnceItsOwnersMovedOn(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	db.Exec(t, `INSERT INTO inorder.cursor (process_name) VALUES ('orders')`)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	current := currentSlot(t, conn)
	prev := (current + 2) % 3
	db.Exec(t, `INSERT INTO inorder.checkpoint (slot, process_name, position_created_at, position_id, records_handled)
		VALUES ($1, 'orders', '2026-01-02T00:00:00Z', '7', 7)`, prev)

	res := rotated(t, conn, prev)
	require.False(t, res.Truncated, "the process's newest entry is in the previous slot")
	require.Equal(t, "orders", res.Waiting)
	require.Zero(t, res.Folded, "the previous slot is never folded: its owner is about to move on")

	db.Exec(t, `INSERT INTO inorder.checkpoint (slot, process_name, position_created_at, position_id, records_handled)
		VALUES ($1, 'orders', '2026-01-02T00:00:00Z', '8', 8)`, current)
	version := func() (v string) {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT xmin::text || ctid::text FROM inorder.cursor").Scan(&v))
		return v
	}
	before := version()
	res = rotated(t, conn, prev)
	require.True(t, res.Truncated, "%+v", res)
	pos, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, "8", pos.ID)
	require.Equal(t, before, version(), "emptying the previous slot writes no cursor row")
}

// currentSlot waits until the database's clock has at least half a turn left in its current slot, so that
// a test's steps happen within one turn, and returns that slot.
func currentSlot(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	ctx := context.Background()
	var slot int
	require.Eventually(t, func() bool {
		var early bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT inorder.checkpoint_slot(),
			extract(epoch FROM clock_timestamp())::numeric % 10 < 5`).Scan(&slot, &early))
		return early
	}, 10*time.Second, 50*time.Millisecond)
	return slot
}

// rotated runs one rotation step and returns what it did to slot.
func rotated(t *testing.T, conn *pgx.Conn, slot int) store.RotateResult {
	t.Helper()
	return rotatedCtx(t, context.Background(), conn, slot)
}

func rotatedCtx(t *testing.T, ctx context.Context, conn *pgx.Conn, slot int) store.RotateResult {
	t.Helper()
	results, err := store.RotateCheckpoints(ctx, conn)
	require.NoError(t, err)
	for _, res := range results {
		if res.Table == slot {
			return res
		}
	}
	t.Fatalf("the rotation did not look at slot %d: %+v", slot, results)
	return store.RotateResult{}
}

// TestANewerBinaryRefusesAnOlderSchema: an instance of this version started before `inorder migrate`
// applied its schema stops at once, in one line naming both versions, rather than fail later on a column
// it lacks; a role that runs processors needs no grant on the migrations table for it.
func TestANewerBinaryRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	ctx := context.Background()
	applySchemaUpTo(t, db, 12)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	_, err = cursors.Open(ctx, "orders", store.Config{ConnConfig: cc, Start: inordertype.StartFromBeginning})
	require.Error(t, err)
	var se *store.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, store.SchemaError{Have: 12, Need: se.Need}, *se)
	require.GreaterOrEqual(t, se.Need, 13)
	require.Contains(t, err.Error(), fmt.Sprintf("the schema is at version 12, this inorder needs %d: run `inorder migrate` (safe while older instances run)", se.Need))
}

// applySchemaUpTo applies inorder's migrations up to version last, with their bookkeeping, as Migrate did
// for a binary of that version.
func applySchemaUpTo(t *testing.T, db *pgtest.DB, last int) {
	t.Helper()
	db.Exec(t, `CREATE SCHEMA IF NOT EXISTS inorder;
		CREATE TABLE inorder.schema_migration (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	for _, m := range migrations.All() {
		if m.Version > last {
			break
		}
		db.Exec(t, m.SQL)
		db.Exec(t, fmt.Sprintf("INSERT INTO inorder.schema_migration (version, name) VALUES (%d, '%s')", m.Version, m.Name))
	}
}

// TestAnEntryGoesIntoTheSlotItsLockFoundCurrent: positions committed one by one go into the partition of
// the slot the database's clock names, the one the rotation leaves alone.
func TestAnEntryGoesIntoTheSlotItsLockFoundCurrent(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	repo := openOrders(t, cfg)
	current := currentSlot(t, conn)
	pos := checkpoints(t, repo, 1, 50)
	require.Equal(t, 50, entriesIn(t, db, current))
	read, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, pos, read)
}
