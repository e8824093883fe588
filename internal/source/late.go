package source

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
)

// Span is a stretch of the table's order a processor has passed: the rows after From up to and with To.
type Span struct {
	From, To inordertype.Position
}

// CountSpans counts the rows of t (of its partition, for a partition) in each span now, in one
// statement: a row that committed behind the position after the processor passed it makes a span count
// more than was delivered in it.
func (t *Table) CountSpans(ctx context.Context, q Querier, spans []Span) ([]int64, error) {
	fromAt, toAt := make([]*time.Time, len(spans)), make([]time.Time, len(spans))
	fromID, toID := make([]*string, len(spans)), make([]string, len(spans))
	for i, s := range spans {
		if !s.From.IsBeginning() {
			at := s.From.CreatedAt
			fromAt[i] = &at
			if s.From.ID != "" {
				id := s.From.ID
				fromID[i] = &id
			}
		}
		toAt[i], toID[i] = s.To.CreatedAt, s.To.ID
	}
	at, id := t.AtExpr("s."), "s."+quote(t.Spec.IDColumn)
	part := ""
	if t.Part != nil {
		part = fmt.Sprintf(" AND %s = %d", t.PartExpr("s."), t.Part.Index)
	}
	part += t.FilterCond() // only the rows the process reads were delivered
	// A span from the beginning has no From; from a time alone, every row at that time is before it.
	sql := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s AS s
			WHERE (r.fa IS NULL OR (r.fi IS NULL AND %[2]s > r.fa) OR (%[2]s, %[3]s) > (r.fa, r.fi::%[4]s))
			  AND (%[2]s, %[3]s) <= (r.ta, r.ti::%[4]s)%[5]s)
		FROM unnest($1::timestamptz[], $2::text[], $3::timestamptz[], $4::text[]) WITH ORDINALITY AS r(fa, fi, ta, ti, n)
		ORDER BY r.n`, t.Ident, at, id, t.IDCast, part)
	rows, err := q.Query(ctx, sql, fromAt, fromID, toAt, toID)
	if err != nil {
		return nil, fmt.Errorf("count the rows behind the position in %s: %w", t.Qualified, err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("count the rows behind the position in %s: %w", t.Qualified, err)
	}
	return counts, nil
}
