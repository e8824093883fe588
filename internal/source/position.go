package source

import (
	"fmt"
	"time"
)

// Position is a place in a stream, as cursor.Position (same fields, so one converts to the other): just
// after the row (CreatedAt, ID), after every row created at CreatedAt when ID is empty, or the beginning
// when CreatedAt is zero.
type Position struct {
	CreatedAt time.Time
	ID        string
}

// IsBeginning reports whether p is before every row.
func (p Position) IsBeginning() bool { return p.CreatedAt.IsZero() }

// String formats the position for logs and status.
func (p Position) String() string {
	switch {
	case p.IsBeginning():
		return "beginning"
	case p.ID == "":
		return "after " + p.CreatedAt.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprintf("%s/%s", p.CreatedAt.UTC().Format(time.RFC3339Nano), p.ID)
	}
}

// Args are the values a cursor row stores for p: NULLs for the beginning, a NULL id for a time alone.
func (p Position) Args() [2]any {
	if p.IsBeginning() {
		return [2]any{nil, nil}
	}
	var id any
	if p.ID != "" {
		id = p.ID
	}
	return [2]any{p.CreatedAt, id}
}

// After is the keyset condition "the row comes after p" on the table's columns, its parameters numbered
// from n, and their values. It is the one place where the three forms of a position become SQL.
func (t *Table) After(p Position, prefix string, n int) (cond string, args []any) {
	ca := prefix + quote(t.Spec.CreatedAtColumn)
	id := prefix + quote(t.Spec.IDColumn)
	switch {
	case p.IsBeginning():
		return "true", nil
	case p.ID == "":
		return fmt.Sprintf("%s > $%d", ca, n), []any{p.CreatedAt}
	default:
		return fmt.Sprintf("(%s, %s) > ($%d, $%d::text::%s)", ca, id, n, n+1, t.IDCast), []any{p.CreatedAt, p.ID}
	}
}
