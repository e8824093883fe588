package source

import (
	"context"
	"fmt"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// A failover to a standby that had not received the last commits of the old primary (asynchronous
// replication) takes back rows that were committed, and positions too. A processor that delivered such
// rows before the failover finds, on the new primary, its cursor row behind what it delivered, and some of
// what it delivered gone. Redelivering from the older position is what at-least-once delivery does; the
// rows that are gone cannot be delivered again, and an operator should know which the sink has.

// Recheck is what the table says now of records delivered earlier.
type Recheck struct {
	// After counts the records after the position asked about: what will be delivered again.
	After int
	// Vanished are the records that no row of the table has any more (no row with their created_at and
	// id), in the order asked: those after the position, and those before it that were delivered lately
	// (a failover can take them back while another instance moves the position past their place).
	Vanished []inordertype.Position
}

// Recheck looks up the delivered records ps (each with an id) in one statement: how many lie after pos,
// and which no longer exist among those after pos and the recent ones, ps[recentFrom:].
func (t *Table) Recheck(ctx context.Context, q Querier, pos inordertype.Position, ps []inordertype.Position, recentFrom int) (Recheck, error) {
	var r Recheck
	if len(ps) == 0 {
		return r, nil
	}
	ats, ids := make([]time.Time, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		ats[i], ids[i] = p.CreatedAt, p.ID
	}
	cond, args := keysetAfter("u.inorder_at_", "u.inorder_id_", t.IDCast, pos, 3)
	sql := fmt.Sprintf(`
		SELECT (u.inorder_ord - 1)::int, %[5]s,
		       EXISTS (SELECT 1 FROM %[1]s AS s WHERE %[2]s = u.inorder_at_ AND s.%[3]s = u.inorder_id_)
		FROM (SELECT x.a AS inorder_at_, x.i::text::%[4]s AS inorder_id_, x.n AS inorder_ord
		      FROM unnest($1::timestamptz[], $2::text[]) WITH ORDINALITY AS x(a, i, n)) AS u
		ORDER BY u.inorder_ord`, t.Ident, t.AtExpr("s."), quote(t.Spec.IDColumn), t.IDCast, cond)
	rows, err := q.Query(ctx, sql, append([]any{ats, ids}, args...)...)
	if err != nil {
		return r, fmt.Errorf("look up delivered records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var after, exists bool
		if err := rows.Scan(&i, &after, &exists); err != nil {
			return r, fmt.Errorf("look up delivered records: %w", err)
		}
		if after {
			r.After++
		}
		if !exists && (after || int(i) >= recentFrom) {
			r.Vanished = append(r.Vanished, ps[i])
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("look up delivered records: %w", err)
	}
	return r, nil
}
