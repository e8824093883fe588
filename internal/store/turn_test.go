package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
)

// holdAsPgDump holds, on a connection of its own, what a pg_dump holds for its whole length: a REPEATABLE
// READ, READ ONLY snapshot and ACCESS SHARE on every table of inorder's schema that exists now. It
// returns the function that ends the hold.
func holdAsPgDump(t *testing.T, db *pgtest.DB) (end func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT format('inorder.%I', relname) FROM pg_class
		WHERE relnamespace = 'inorder'::regnamespace AND relkind IN ('r', 'p') ORDER BY relname`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "inorder.checkpoint_0")
	_, err = tx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN ACCESS SHARE MODE")
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Rollback(ctx)) }
}

// rotatorAsProcessorRole connects to db as a role that does not own inorder's tables but was granted what
// a role that runs processors is (as migration 13 grants it, or by hand since), for the rotation's steps.
func rotatorAsProcessorRole(t *testing.T, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	url := pgtest.Unprivileged(t, db)
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	role := pgx.Identifier{cc.User}.Sanitize()
	db.Exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA inorder TO %[1]s;
		GRANT SELECT, UPDATE ON inorder.cursor TO %[1]s;
		GRANT SELECT, INSERT, TRUNCATE ON inorder.checkpoint, inorder.checkpoint_0, inorder.checkpoint_1,
			inorder.checkpoint_2 TO %[1]s;
		GRANT USAGE ON SEQUENCE inorder.checkpoint_seq TO %[1]s;
		GRANT SELECT ON inorder.position TO %[1]s;
		GRANT EXECUTE ON FUNCTION inorder.checkpoint_new_turn(), inorder.checkpoint_set_turn(smallint),
			inorder.checkpoint_drop_turn(smallint) TO %[1]s`, role))
	conn, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// logState is the checkpoint log as a test sees it: the partitions' slots, their total size, and the slot
// current now.
type logState struct {
	slots   []int
	size    int64
	current int
}

func readLog(t *testing.T, db *pgtest.DB) logState {
	t.Helper()
	var s logState
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT array_agg(substring(c.relname FROM '[0-9]+$')::int ORDER BY 1), sum(pg_total_relation_size(c.oid)),
		       inorder.checkpoint_slot()
		FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'inorder.checkpoint'::regclass`).Scan(&s.slots, &s.size, &s.current))
	return s
}

// TestTurnsKeepEmptyingTheLogWhileAPgDumpHoldsIt: a pg_dump holds the three slots for its whole length, so
// no TRUNCATE can empty them. Once the slot current when it started has grown past the size for a turn, the
// rotation (run as a role that owns none of inorder's tables) attaches a partition the dump does not hold
// and makes it current; from then on the entries appended go into partitions that take turns and are
// emptied while the dump still holds, the log's size stays bounded, and positions never go back. Once the
// dump ends the turn goes back to the clock and the partitions it added are dropped.
func TestTurnsKeepEmptyingTheLogWhileAPgDumpHoldsIt(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	repo := openOrders(t, cfg)
	rotator := rotatorAsProcessorRole(t, db)
	const freshAt = 64 << 10 // a turn after about 400 entries
	const batch = 100        // entries appended between two steps, about 17 KiB
	var last inordertype.Position
	next := 0
	appendAndStep := func() []store.RotateResult {
		pos := checkpoints(t, repo, next+1, next+batch)
		next += batch
		read, err := store.ReadPosition(ctx, db.Pool, "orders")
		require.NoError(t, err)
		require.Equal(t, pos, read, "the position as it stands is the newest entry")
		require.True(t, last.CreatedAt.Before(read.CreatedAt), "the position went back from %v to %v", last, read)
		last = read
		results, err := store.RotateCheckpointsFreshAt(ctx, rotator, freshAt)
		require.NoError(t, err)
		return results
	}

	end := holdAsPgDump(t, db)
	for i := 0; readLog(t, db).current < 3; i++ {
		require.Less(t, i, 30, "no turn while the dump holds the current slot: %+v", readLog(t, db))
		appendAndStep()
	}
	held := readLog(t, db) // the clock's slots, which the dump holds, and the first turn's partition
	truncated := 0
	for range 40 {
		for _, res := range appendAndStep() {
			if res.Table >= 3 && res.Truncated {
				truncated++
			}
		}
		s := readLog(t, db)
		require.LessOrEqual(t, len(s.slots), 5, "partitions: %v", s.slots)
		require.LessOrEqual(t, s.size, held.size+4*freshAt, "the log grows while the dump holds it: %+v", s)
	}
	require.GreaterOrEqual(t, truncated, 5, "the turns' partitions are emptied while the dump holds")
	t.Logf("first turn at %+v; after %d more entries %+v, %d truncations of turns' partitions", held, 40*batch,
		readLog(t, db), truncated)

	end()
	for i := 0; ; i++ {
		s := readLog(t, db)
		if s.current < 3 && len(s.slots) == 3 {
			require.Equal(t, []int{0, 1, 2}, s.slots)
			break
		}
		require.Less(t, i, 30, "the turns' partitions outlive the dump: %+v", s)
		appendAndStep()
	}
}

// TestATurnWithoutItsTableLeavesTheSlotToTheClock: a dump taken during a turn holds the turn (a sequence's
// value is read as it is, not under the dump's snapshot) but not the table attached for it after the dump
// began; restored, the turn names no table, and positions are appended to the slot the clock names rather
// than refused, and the rotation gives the turn back to the clock.
func TestATurnWithoutItsTableLeavesTheSlotToTheClock(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	db.Exec(t, "SELECT setval('inorder.checkpoint_turn', 7, true)")
	repo := openOrders(t, cfg)
	pos := checkpoints(t, repo, 1, 3)
	read, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, pos, read)
	require.Less(t, readLog(t, db).current, 3)

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = store.RotateCheckpoints(ctx, conn)
	require.NoError(t, err)
	var turn bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT is_called FROM inorder.checkpoint_turn").Scan(&turn))
	require.False(t, turn, "the rotation gives the turn back to the clock")
}

// entriesIn counts process "orders"'s entries in slot's partition.
func entriesIn(t *testing.T, db *pgtest.DB, slot int) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT count(*) FROM inorder.checkpoint_%d WHERE process_name = 'orders'", slot)).Scan(&n))
	return n
}

// TestAnAppendNeverNamesATurnsTableThatMayBeGone: a position goes into the partition of the slot its
// transaction's lock found current. A turn's partition is dropped once it is empty and the clock names the
// slot again, which may happen between the lock and the append, while a handler runs: the append must then
// still land, and only a partition that holds the process's newest entry (which keeps it from being
// emptied) is named directly. The entries appended while the turn rules go into its partition.
func TestAnAppendNeverNamesATurnsTableThatMayBeGone(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	repo := openOrders(t, cfg)
	checkpoints(t, repo, 1, 1)

	// A turn, made current while the row is held: the next lock names its slot.
	var slot int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT inorder.checkpoint_new_turn()").Scan(&slot))
	db.Exec(t, "SELECT inorder.checkpoint_set_turn($1::smallint)", slot)
	checkpoints(t, repo, 2, 2) // appended where the lock before the turn said; the relock names the turn
	require.Zero(t, entriesIn(t, db, slot))

	// While the handler of record 3 runs, the dump ends: the turn goes back to the clock, and its partition,
	// empty, is dropped.
	db.Exec(t, "SELECT inorder.checkpoint_set_turn(NULL)")
	var dropped bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT inorder.checkpoint_drop_turn($1::smallint)", slot).Scan(&dropped))
	require.True(t, dropped, "nothing holds the turn's partition")
	pos := checkpoints(t, repo, 3, 5)
	read, err := store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, pos, read)

	// A turn again: after the first entry in its partition, the rest go there directly.
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT inorder.checkpoint_new_turn()").Scan(&slot))
	db.Exec(t, "SELECT inorder.checkpoint_set_turn($1::smallint)", slot)
	pos = checkpoints(t, repo, 6, 20)
	require.Equal(t, 14, entriesIn(t, db, slot), "every entry after the one the relock before the turn placed")
	read, err = store.ReadPosition(ctx, db.Pool, "orders")
	require.NoError(t, err)
	require.Equal(t, pos, read)
}
