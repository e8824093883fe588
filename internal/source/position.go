package source

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
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

// ExistsAfter is the SQL boolean expression "a committed row of t lies after p" (a row of its
// partition, for a partition), its parameters numbered from n, and their values: what status asks to say
// whether a process has caught up, horizon or not, as Behind counts.
func (t *Table) ExistsAfter(p inordertype.Position, n int) (expr string, args []any) {
	cond, args := t.After(p, "", n)
	if t.Part != nil {
		cond += fmt.Sprintf(" AND %s = %d", t.PartExpr(""), t.Part.Index)
	}
	return "EXISTS (SELECT 1 FROM " + t.Ident + " WHERE " + cond + ")", args
}

// ProbeQuestion is the idle probe's question of t for a processor at p (see store.RowsQuestion): does a
// row lie after p that a batch could read now, created_at earlier than the database's clock less margin
// (the insert latency)? So not a row dated in the future, nor one within the margin, nor a NULL
// created_at, which no batch reads: a yes for rows no batch reads would run batch after batch that read
// nothing. With known set, it also asks whether t's columns no longer have that fingerprint (see Shape):
// a migration of a quiet stream's source then wakes the stream for a batch that says what it waits for,
// rather than a lease later.
//
// The condition is the same for every processor of t whose position has the same form (the beginning, a
// time, a time and an id) and that asks the same things; only the values differ. The probe asks it of
// all of them in one scan of their values, planned once: an expression per processor, a thousand of them
// in one statement, cost the server more to plan than to run.
func (t *Table) ProbeQuestion(p inordertype.Position, margin time.Duration, known string) store.RowsQuestion {
	var q store.RowsQuestion
	value := func(typ string, v any) string {
		q.Types, q.Values = append(q.Types, typ), append(q.Values, v)
		return fmt.Sprintf("w.v%d", len(q.Values))
	}
	ca := t.AtExpr("")
	var cond string
	switch {
	case p.IsBeginning():
		cond = "true"
	case p.ID == "":
		cond = fmt.Sprintf("%s > %s", ca, value(t.atType(), p.CreatedAt))
	default:
		cond = fmt.Sprintf("(%s, %s) > (%s, %s::%s)", ca, quote(t.Spec.IDColumn), value(t.atType(), p.CreatedAt),
			value("text", p.ID), t.IDCast)
	}
	cond += fmt.Sprintf(" AND %s < clock_timestamp() - %s", ca, value("interval", margin))
	if t.Part != nil {
		cond += fmt.Sprintf(" AND %s = %s", t.PartExpr(""), value("int4", int32(t.Part.Index)))
	}
	q.Cond = "EXISTS (SELECT 1 FROM " + t.Ident + " WHERE " + cond + ")"
	if known != "" {
		shape := strings.Replace(shapeExpr, "$1", strconv.FormatUint(uint64(t.OID), 10), 1)
		q.Cond = "(" + q.Cond + " OR " + shape + " IS DISTINCT FROM " + value("text", known) + ")"
	}
	return q
}
