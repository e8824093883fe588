package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/clock"
)

// The insert clock: a column, inorder_at, that a BEFORE INSERT trigger sets to the database's clock at
// every insert, whatever the insert says. An application that stamps created_at with its own clock (an
// ORM's time.Now(), a host whose clock is behind, an event stamped when it was built and inserted later)
// can write a row dated before rows already read; the clock cannot, since it is read at the insert, after
// the inserting transaction took the lock on the table that the writers horizon watches. So a table with
// the clock is ordered by it, with the writers horizon, and no application clock nor a dump's snapshot
// matters to what is read when.
//
// Rows inserted before the clock was added have no inorder_at; they were all committed before it was (the
// ALTER TABLE that adds it waits for every writer of the table), so none of them can still appear. They
// are ordered by created_at, the table's time as it was read before the clock: a row's time in its
// position is coalesce(inorder_at, created_at), and an index on that expression and the id serves the
// read. A position taken before the clock keeps its meaning across it.

// The clock's names, as migration 14 and migrations.AddClock make them.
const (
	ClockColumn   = clock.Column
	ClockTrigger  = clock.Trigger
	ClockFunction = clock.Function
)

// Clock is a table's insert clock as the catalog shows it.
type Clock struct {
	// Since is when the clock was added: every row inserted after it has a time in ClockColumn later than
	// Since, and every row inserted before it has none.
	Since time.Time
	// Enabled reports whether the trigger fires for ordinary inserts. A disabled trigger (ALTER TABLE ...
	// DISABLE TRIGGER) lets an insert write ClockColumn itself.
	Enabled bool
}

// findClock reads the table's insert clock: nil when it has none (no trigger of that name calling the
// clock's function, or no such column).
func findClock(ctx context.Context, conn Querier, t *Table, all []Column) (*Clock, error) {
	var col *Column
	for i := range all {
		if all[i].Name == ClockColumn {
			col = &all[i]
		}
	}
	if col == nil {
		return nil, nil
	}
	var args string
	var enabled bool
	err := conn.QueryRow(ctx, `
		SELECT encode(g.tgargs, 'escape'), g.tgenabled IN ('O', 'A')
		FROM pg_trigger g
		WHERE g.tgrelid = $1 AND g.tgname = $2 AND g.tgfoid = to_regprocedure($3 || '()')`,
		t.OID, ClockTrigger, ClockFunction).Scan(&args, &enabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect the insert clock of %s: %w", t.Qualified, err)
	}
	if col.TypName != "timestamptz" {
		return nil, invalid("%s.%s is %s; the insert clock is timestamptz", t.Qualified, ClockColumn, col.Type)
	}
	c := &Clock{Enabled: enabled}
	since, _, _ := strings.Cut(args, `\000`)
	if c.Since, err = time.Parse(time.RFC3339Nano, since); err != nil {
		return nil, invalid("the insert clock's trigger on %s has no time it was added (%q): drop the trigger and run inorder migrate --table %s again",
			t.Qualified, args, t.Qualified)
	}
	return c, nil
}

// AtExpr is the SQL expression of a row's time in its position, its column references prefixed (an alias
// with its dot, or ""): the insert clock, falling back to created_at for rows older than the clock, when the
// table has it; created_at otherwise. Every read, index and comparison of positions uses it, so that the
// expression index on it serves them.
func (t *Table) AtExpr(prefix string) string {
	return atExpr(prefix, t.Spec.CreatedAtColumn, t.createdAtType, t.Horizon == inordertype.HorizonClock)
}

// atType is the SQL type of AtExpr: the insert clock's timestamptz, or the created_at column's type.
func (t *Table) atType() string {
	if t.Horizon == inordertype.HorizonClock {
		return "timestamptz"
	}
	return t.createdAtType
}

// atExpr is AtExpr for a created_at column of typname typ.
func atExpr(prefix, createdAt, typ string, clocked bool) string {
	if !clocked {
		return prefix + quote(createdAt)
	}
	return clock.Expr(prefix, createdAt, typ)
}

// sameExpr reports whether an expression as pg_get_indexdef prints it is the expression want as this
// package writes it: the server adds casts of literals and parentheses, quotes only what needs it, and
// upper-cases COALESCE.
func sameExpr(printed, want string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		for _, drop := range []string{"::text", `"`, " ", "(", ")"} {
			s = strings.ReplaceAll(s, drop, "")
		}
		return s
	}
	return norm(printed) == norm(want)
}

// AddClockCommand is the one command that gives table the insert clock.
func AddClockCommand(table string) string {
	return "inorder migrate --table " + table
}
