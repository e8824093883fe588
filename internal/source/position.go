package source

import (
	"fmt"

	"github.com/inorder-dev/inorder/inordertype"
)

// Args are the values a cursor row stores for p (position_created_at, position_id): NULLs for the
// beginning, a NULL id for a time alone.
func Args(p inordertype.Position) [2]any {
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
func (t *Table) After(p inordertype.Position, prefix string, n int) (cond string, args []any) {
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
