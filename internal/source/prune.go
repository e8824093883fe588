package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
)

// Resolve finds table in the catalog as the role sees it (search_path included) and returns its
// schema-qualified name, the form processors record in their cursor rows.
func Resolve(ctx context.Context, q Querier, table string) (string, error) {
	if strings.TrimSpace(table) == "" {
		return "", invalid("no table given")
	}
	r, err := lookup(ctx, q, table)
	if err != nil {
		return "", err
	}
	return r.schema + "." + r.name, nil
}

// Admin is an operator's work on a source table outside any stream, for the cursor package's tools:
// which rows a prune may delete, and deletes them; where records lie in the table's order; how far a
// position is behind. A stream's own reads are Table's.
type Admin struct{ t *Table }

// AdminOf returns the operator's work on t.
func AdminOf(t *Table) Admin { return Admin{t: t} }

// Passed is the condition "the row is at or before p": a process at p has handled it. Its parameters
// are numbered from n. Nothing is at or before the beginning.
func (a Admin) Passed(p inordertype.Position, prefix string, n int) (cond string, args []any) {
	ca := a.t.AtExpr(prefix)
	id := prefix + quote(a.t.Spec.IDColumn)
	switch {
	case p.IsBeginning():
		return "false", nil
	case p.ID == "":
		return fmt.Sprintf("%s <= $%d", ca, n), []any{p.CreatedAt}
	default:
		return fmt.Sprintf("(%s, %s) <= ($%d, $%d::text::%s)", ca, id, n, n+1, a.t.IDCast), []any{p.CreatedAt, p.ID}
	}
}

// Order returns the indexes of ps from the position furthest back to the one furthest ahead, ordered as
// the table orders its rows (the id compared as its own type, not as text), in one query. Equal positions
// keep their order in ps.
func (a Admin) Order(ctx context.Context, q Querier, ps []inordertype.Position) ([]int, error) {
	ats := make([]*time.Time, len(ps))
	ids := make([]*string, len(ps))
	for i, p := range ps {
		if p.IsBeginning() {
			continue // NULL: before every row
		}
		at := p.CreatedAt
		ats[i] = &at
		if p.ID != "" {
			id := p.ID
			ids[i] = &id
		}
	}
	// A position with no id is after every row of its time: its id sorts last.
	sql := fmt.Sprintf(`SELECT (i - 1)::int FROM unnest($1::timestamptz[], $2::text[]) WITH ORDINALITY AS p(at, id, i)
		ORDER BY at NULLS FIRST, id::%s NULLS LAST, i`, a.t.IDCast)
	rows, err := q.Query(ctx, sql, ats, ids)
	if err == nil {
		var order []int32
		if order, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err == nil {
			out := make([]int, len(order))
			for k, i := range order {
				out[k] = int(i)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("compare positions in %s: %w", a.t.Qualified, err)
}

// Find returns the position of record id in t.
func (a Admin) Find(ctx context.Context, q Querier, id string) (inordertype.Position, error) {
	ca, idc := a.t.AtExpr(""), quote(a.t.Spec.IDColumn)
	var at time.Time
	pos := inordertype.Position{}
	sql := fmt.Sprintf(`SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s WHERE %[2]s = $1::text::%[4]s
		ORDER BY %[1]s LIMIT 1`, ca, idc, a.t.Ident, a.t.IDCast)
	if err := q.QueryRow(ctx, sql, id).Scan(&at, &pos.ID); errors.Is(err, pgx.ErrNoRows) {
		return inordertype.Position{}, fmt.Errorf("record %s in %s: %w", id, a.t.Qualified, ErrNoRecord)
	} else if err != nil {
		return inordertype.Position{}, fmt.Errorf("find record %s in %s: %w", id, a.t.Qualified, err)
	}
	pos.CreatedAt = at.UTC()
	return pos, nil
}

// Prunable selects the rows of t that may go: created before cut, passed by every one of passed (at or
// before each position), and after from (where the previous batch ended; the beginning for the first).
type Prunable struct {
	Cut    time.Time
	Passed []inordertype.Position
	// Lowest indexes the lowest of Passed: its condition leads, so that an index scan stops there.
	Lowest int
	From   inordertype.Position
}

// where builds the condition and its arguments. Every position's condition is there, not only the
// lowest's, so the selection is exact whatever Lowest says.
func (a Admin) prunableWhere(p Prunable, prefix string) (string, []any) {
	conds := []string{}
	var args []any
	add := func(cond string, a []any) {
		conds = append(conds, cond)
		args = append(args, a...)
	}
	add(a.Passed(p.Passed[p.Lowest], prefix, 1))
	for i, pos := range p.Passed {
		if i != p.Lowest {
			add(a.Passed(pos, prefix, len(args)+1))
		}
	}
	add(a.t.After(p.From, prefix, len(args)+1))
	add(fmt.Sprintf("%s < $%d", a.t.AtExpr(prefix), len(args)+1), []any{p.Cut})
	return strings.Join(conds, " AND "), args
}

// CountPrunable counts the rows p selects and returns the last of them (the beginning when there is
// none), deleting nothing: a dry run.
func (a Admin) CountPrunable(ctx context.Context, q Querier, p Prunable) (int64, inordertype.Position, error) {
	where, args := a.prunableWhere(p, "")
	ca, id := a.t.AtExpr(""), quote(a.t.Spec.IDColumn)
	sql := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s WHERE %[2]s), last.at, last.id
		FROM (SELECT) AS one LEFT JOIN LATERAL (
			SELECT %[3]s::timestamptz AS at, %[4]s::text AS id FROM %[1]s WHERE %[2]s ORDER BY %[3]s DESC, %[4]s DESC LIMIT 1
		) AS last ON true`, a.t.Ident, where, ca, id)
	return a.scanPruned(ctx, q, sql, args)
}

// DeletePrunable deletes the first limit rows p selects, in (created_at, id) order, in one statement, and
// returns how many went and the last of them. It finds the last row of the batch through the keyset index,
// then deletes the range up to it by the same index (on a table partitioned by time, in the partitions
// the range reaches): a batch touches only its own rows, so writers of new rows and readers are not
// blocked.
func (a Admin) DeletePrunable(ctx context.Context, q Querier, p Prunable, limit int) (int64, inordertype.Position, error) {
	where, args := a.prunableWhere(p, "")
	ca, id := a.t.AtExpr(""), quote(a.t.Spec.IDColumn)
	sql := fmt.Sprintf(`WITH batch_end AS (
			SELECT inorder_at_, inorder_id_ FROM (
				SELECT %[3]s AS inorder_at_, %[4]s AS inorder_id_ FROM %[1]s WHERE %[2]s ORDER BY %[3]s, %[4]s LIMIT $%[5]d
			) AS batch
			ORDER BY inorder_at_ DESC, inorder_id_ DESC LIMIT 1),
		gone AS (
			DELETE FROM %[1]s WHERE %[2]s AND (%[3]s, %[4]s) <= (SELECT inorder_at_, inorder_id_ FROM batch_end)
			RETURNING %[3]s AS inorder_at_, %[4]s AS inorder_id_)
		SELECT (SELECT count(*) FROM gone), last.at, last.id
		FROM (SELECT) AS one LEFT JOIN LATERAL (
			SELECT inorder_at_::timestamptz AS at, inorder_id_::text AS id FROM gone ORDER BY inorder_at_ DESC, inorder_id_ DESC LIMIT 1
		) AS last ON true`,
		a.t.Ident, where, ca, id, len(args)+1)
	return a.scanPruned(ctx, q, sql, append(args, limit))
}

func (a Admin) scanPruned(ctx context.Context, q Querier, sql string, args []any) (int64, inordertype.Position, error) {
	var n int64
	var at *time.Time
	var id *string
	if err := q.QueryRow(ctx, sql, args...).Scan(&n, &at, &id); err != nil {
		return 0, inordertype.Position{}, fmt.Errorf("prune %s: %w", a.t.Qualified, err)
	}
	if at == nil || id == nil {
		return n, inordertype.Position{}, nil
	}
	return n, inordertype.Position{CreatedAt: at.UTC(), ID: *id}, nil
}
