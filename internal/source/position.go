package source

import (
	"fmt"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// After is the keyset condition "the row comes after p" on the table's columns, its parameters numbered
// from n, and their values. It is the one place where the three forms of a position become SQL.
func (t *Table) After(p inordertype.Position, prefix string, n int) (cond string, args []any) {
	return keysetAfter(t.AtExpr(prefix), prefix+quote(t.Spec.IDColumn), t.IDCast, p, n)
}

// keysetAfter is After over the expressions ca and id of a row's position.
func keysetAfter(ca, id, idCast string, p inordertype.Position, n int) (cond string, args []any) {
	switch {
	case p.IsBeginning():
		return "true", nil
	case p.ID == "":
		return fmt.Sprintf("%s > $%d", ca, n), []any{p.CreatedAt}
	default:
		return fmt.Sprintf("(%s, %s) > ($%d, $%d::text::%s)", ca, id, n, n+1, idCast), []any{p.CreatedAt, p.ID}
	}
}

// ExistsAfter is the SQL boolean expression "a row of t lies after p" (a row of its partition, for a
// partition), its parameters numbered from n, and their values: the one question about the rows after a
// position that the idle probe and the status listing ask of the source.
//
// With a margin, only rows a batch could read now count: created_at earlier than the database's clock
// less margin (the insert latency), so not a row dated in the future, nor one within the margin, nor a
// NULL created_at, which no batch reads. With nil, every committed row after p counts, horizon or not, as
// Behind counts them.
func (t *Table) ExistsAfter(p inordertype.Position, margin *time.Duration, n int) (expr string, args []any) {
	cond, args := t.After(p, "", n)
	if margin != nil {
		cond += fmt.Sprintf(" AND %s < clock_timestamp() - $%d::interval", t.AtExpr(""), n+len(args))
		args = append(args, *margin)
	}
	if t.Part != nil {
		cond += fmt.Sprintf(" AND %s = %d", t.PartExpr(""), t.Part.Index)
	}
	return "EXISTS (SELECT 1 FROM " + t.Ident + " WHERE " + cond + ")", args
}
