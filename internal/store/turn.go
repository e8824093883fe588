// Turns: how the rotation keeps emptying the checkpoint log while a pg_dump runs.
//
// Why.
//
// pg_dump takes ACCESS SHARE on every table it dumps, when it starts, and holds it until it ends: the
// rotation's TRUNCATE (which needs ACCESS EXCLUSIVE) can empty none of the three slots meanwhile, and the
// log grows by an entry per record for as long as the dump runs (measured: 89.6 MiB after a 10-minute dump
// at 1,000 records a second). But a dump locks only the tables that existed when it started. A partition
// attached after that is not locked by it, and can be truncated as usual.
//
// How.
//
// When the slot current now is held by a transaction that appends nothing (a dump, a long reader: see
// slotsSQL) and has grown past freshTurnSize, the rotation makes another slot current in the clock's
// place: a turn. The slot is one of the partitions attached for earlier turns, empty and held by no one,
// or else a fresh one that inorder.checkpoint_new_turn() creates and attaches (migration 13: ATTACH takes
// SHARE UPDATE EXCLUSIVE on the parent, which neither a dump's ACCESS SHARE nor the inserts' ROW EXCLUSIVE
// conflicts with, so nothing waits for it). The turn is the value of the sequence inorder.checkpoint_turn,
// which inorder.checkpoint_slot() reads before the clock: a sequence is overwritten in place, so a turn
// adds no row version for the held snapshot to keep. While turns rule, the current slot gives way each time
// it grows past freshTurnSize, so that two partitions nobody holds take turns and the one left is emptied as
// usual. Once no transaction holds the clock's three slots any more, the turn goes back to the clock, and
// the partitions of the turns are dropped once empty (DROP needs ACCESS EXCLUSIVE on the parent, which
// every insert and a dump conflict with: it is tried with NOWAIT at each step until it succeeds).
//
// Only turns change the number of partitions, so with no dump there are three, and the view
// inorder.position, which merges one index scan per partition, stays as cheap as it was. A dump adds two,
// and a fresh one only when no other is free; the function refuses past 16.

package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// freshTurnSize is how large (pg_total_relation_size) the current slot grows, while a transaction that
// appends nothing holds it, before a turn replaces it. Small enough that the held slots and the two
// partitions taking turns stay within inorder's 16 MiB at 1,000 records a second (about 169 bytes an entry,
// so a turn every 12 s or so); large enough that a reader holding the slot for a moment makes no turn.
const freshTurnSize = 2 << 20

// slotState is one partition of inorder.checkpoint as a step of the rotation finds it.
type slotState struct {
	slot  int
	table string // its qualified name, quoted
	size  int64  // pg_total_relation_size: heap and index
	held  bool   // another transaction, one that appends nothing to the log, holds a lock on it
	used  bool   // it holds entries
}

// rotationState is what a step of the rotation reads first: the slot current now, whether a turn rather
// than the clock names it, and every partition.
type rotationState struct {
	current int
	turn    bool
	slots   []slotState
}

// slotsSQL lists the partitions of inorder.checkpoint with their sizes, and says which a transaction other
// than this one holds a lock on while it appends nothing to the log: a pg_dump, a report, a session idle
// in transaction after reading the view. The transactions that append (ROW EXCLUSIVE on the log) and the
// rotation's own (ACCESS EXCLUSIVE on a slot) end within moments, and are left out.
const slotsSQL = `WITH locks AS MATERIALIZED (
	SELECT l.relation, l.mode, l.granted, l.pid, l.virtualtransaction FROM pg_locks AS l
	WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
), log AS (
	SELECT inhrelid AS relation FROM pg_inherits WHERE inhparent = 'inorder.checkpoint'::regclass
	UNION ALL SELECT 'inorder.checkpoint'::regclass
), writers AS (
	SELECT virtualtransaction FROM locks WHERE mode <> 'AccessShareLock' AND relation IN (SELECT relation FROM log)
), held AS (
	SELECT relation FROM locks WHERE granted AND pid IS DISTINCT FROM pg_backend_pid()
	AND virtualtransaction NOT IN (SELECT virtualtransaction FROM writers)
)
SELECT substring(c.relname FROM '^checkpoint_([0-9]+)$')::int, format('inorder.%I', c.relname),
       coalesce(pg_total_relation_size(c.oid), 0), c.oid IN (SELECT relation FROM held)
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'inorder.checkpoint'::regclass
ORDER BY 1`

// readRotation reads the rotation's state on q.
func readRotation(ctx context.Context, q Querier) (rotationState, error) {
	var st rotationState
	if err := q.QueryRow(ctx, `SELECT inorder.checkpoint_slot(), is_called FROM inorder.checkpoint_turn`).
		Scan(&st.current, &st.turn); err != nil {
		return st, err
	}
	rows, err := q.Query(ctx, slotsSQL)
	if err != nil {
		return st, err
	}
	st.slots, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (slotState, error) {
		var s slotState
		return s, row.Scan(&s.slot, &s.table, &s.size, &s.held)
	})
	if err != nil || len(st.slots) == 0 {
		return st, err
	}
	exists := make([]string, len(st.slots))
	for i, s := range st.slots {
		exists[i] = "EXISTS (SELECT 1 FROM " + s.table + ")"
	}
	var used []bool
	if err := q.QueryRow(ctx, "SELECT ARRAY["+strings.Join(exists, ", ")+"]").Scan(&used); err != nil {
		return st, err
	}
	for i := range st.slots {
		st.slots[i].used = used[i]
	}
	return st, nil
}

// slotStep is a slot a step of the rotation tries to empty, and how it folds first.
type slotStep struct {
	slot int
	fold foldMode
}

// steps lists the slots this step of the rotation tries to empty: those that are not current and hold
// entries. While the clock names the slot, the next one comes first, folded, then the previous one, not
// folded (its owners are about to leave it); the partitions of turns, and the clock's slots while a turn
// rules, fold only the entries of processes idle for a rotation period.
func (st rotationState) steps() []slotStep {
	var out []slotStep
	used := map[int]bool{}
	for _, s := range st.slots {
		used[s.slot] = s.used
	}
	if !st.turn {
		next, prev := (st.current+1)%CheckpointTables, (st.current+2)%CheckpointTables
		for _, step := range []slotStep{{next, foldAll}, {prev, foldNone}} {
			if used[step.slot] {
				out = append(out, step)
			}
		}
	}
	for _, s := range st.slots {
		if s.used && s.slot != st.current && (st.turn || s.slot >= CheckpointTables) {
			out = append(out, slotStep{s.slot, foldIdle})
		}
	}
	return out
}

// turnAction is what a step does with the turn: nothing, make slot current (the clock when slot < 0), or
// attach a fresh partition first.
type turnAction struct {
	set   bool
	slot  int
	fresh bool
}

// nextTurn decides what this step does with the turn (see the package documentation of this file).
func (st rotationState) nextTurn(freshAt int64) turnAction {
	if st.turn && !st.clockHeld() {
		return turnAction{set: true, slot: -1}
	}
	var cur slotState
	for _, s := range st.slots {
		if s.slot == st.current {
			cur = s
		}
	}
	if cur.size <= freshAt || (!st.turn && !cur.held) {
		return turnAction{}
	}
	for _, s := range st.slots {
		if s.slot >= CheckpointTables && s.slot != st.current && !s.used && !s.held {
			return turnAction{set: true, slot: s.slot}
		}
	}
	return turnAction{fresh: true}
}

// clockHeld reports whether a transaction that appends nothing holds one of the clock's slots.
func (st rotationState) clockHeld() bool {
	for _, s := range st.slots {
		if s.slot < CheckpointTables && s.held {
			return true
		}
	}
	return false
}

// takeTurn moves the turn on when nextTurn says so, under the turns' advisory lock (another instance's
// prober changing the turns meanwhile makes it leave the change to a later step). A fresh partition is
// attached and committed first, and made current in a second transaction: the turn is a sequence, which a
// rollback does not undo, so it never names a partition that might not exist.
func takeTurn(ctx context.Context, conn *pgx.Conn, freshAt int64) error {
	for range 2 {
		fresh := false
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var mine bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)
				FROM (SELECT pg_advisory_xact_lock_shared($2), set_config('application_name', $3, true)) AS marks`,
				TurnLockKey, NoInsertLockKey, RotateApplicationName).Scan(&mine); err != nil || !mine {
				return err
			}
			st, err := readRotation(ctx, tx)
			if err != nil {
				return err
			}
			switch a := st.nextTurn(freshAt); {
			case a.fresh:
				var n *int
				err = tx.QueryRow(ctx, "SELECT inorder.checkpoint_new_turn()").Scan(&n)
				fresh = n != nil
			case a.set && a.slot < 0:
				_, err = tx.Exec(ctx, "SELECT inorder.checkpoint_set_turn(NULL)")
			case a.set:
				_, err = tx.Exec(ctx, "SELECT inorder.checkpoint_set_turn($1::smallint)", a.slot)
			}
			return err
		})
		if refused(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rotate checkpoints: turn: %w", err)
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// dropTurns drops, while the clock names the slot, the partitions of turns that this step found empty or
// emptied, each in a transaction of its own; one in use is left for a later step.
func dropTurns(ctx context.Context, conn *pgx.Conn, st rotationState, done []RotateResult) error {
	if st.turn {
		return nil
	}
	emptied := map[int]bool{}
	for _, res := range done {
		emptied[res.Table] = res.Truncated
	}
	for _, s := range st.slots {
		if s.slot < CheckpointTables || s.slot == st.current || (s.used && !emptied[s.slot]) {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1), set_config('application_name', $2, true),
				inorder.checkpoint_drop_turn($3::smallint)`, NoInsertLockKey, RotateApplicationName, s.slot)
			return err
		})
		if err != nil && !refused(err) {
			return fmt.Errorf("rotate checkpoints: drop slot %d: %w", s.slot, err)
		}
	}
	return nil
}

// refused reports whether err says that a turn could not be taken now or by this role: a lock in use
// (lock_not_available) or a role that may not execute the turns' functions (insufficient_privilege: a role
// granted by hand before them, which then rotates as before turns existed).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "42501")
}
