package source

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/clock"
)

// PartExpr is PartitionExpr for the table's key column, its column reference prefixed (an alias).
func (t *Table) PartExpr(prefix string) string {
	return fmt.Sprintf("((hashtextextended(coalesce(%s%s::text, ''), 0) & 2147483647) %% %d)",
		prefix, pgx.Identifier{t.Spec.KeyColumn}.Sanitize(), t.Part.Count)
}

// PartitionExpr is the SQL expression that puts a row in one of n partitions by its key column: a stable
// hash of the key as text (hashtextextended, which hash partitioning uses too), so one key always lands in
// one partition and keeps its order. Rows whose key is NULL all land in one partition.
func PartitionExpr(keyColumn string, n int) string {
	return fmt.Sprintf("((hashtextextended(coalesce(%s::text, ''), 0) & 2147483647) %% %d)",
		pgx.Identifier{keyColumn}.Sanitize(), n)
}

// PartitionIndexSQL is the index that serves the reads of an n-way partitioned process: the partition
// expression, then the keyset: at, the SQL of a row's time in its position (a column name, or
// ClockAtExpr for a table with the insert clock), and the id column. `inorder migrate --partition-index
// TABLE:KEY:N` creates it.
func PartitionIndexSQL(table, keyColumn, at, idColumn string, n int) string {
	parts := strings.Split(table, ".")
	name := parts[len(parts)-1] + "_" + keyColumn + "_p" + fmt.Sprint(n) + "_idx"
	return fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s, (%s), %s)",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier(parts).Sanitize(), PartitionExpr(keyColumn, n),
		at, pgx.Identifier{idColumn}.Sanitize())
}

// ClockAtExpr is the SQL of a row's time in its position on a table with the insert clock, whose
// created_at column (timestamptz) is createdAt: what PartitionIndexSQL takes for such a table.
func ClockAtExpr(createdAt string) string { return clock.Expr("", createdAt, "timestamptz") }

// hasPartitionIndex looks for an index whose first column is the partition expression for n and whose
// next are the keyset columns. Postgres prints stored expressions in a normal form that depends on the
// key's type, so the expression is recognised by its parts.
func hasPartitionIndex(ctx context.Context, conn Querier, t *Table, n int) (bool, error) {
	rows, err := conn.Query(ctx, `
		SELECT pg_get_indexdef(i.indexrelid, 1, true), pg_get_indexdef(i.indexrelid, 2, true)
		FROM pg_index i
		WHERE i.indrelid = $1 AND i.indpred IS NULL AND i.indnkeyatts >= 3 AND i.indkey[0] = 0
		  AND i.indkey[2] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $2)`,
		t.OID, t.Spec.IDColumn)
	if err != nil {
		return false, fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	type def struct{ part, at string }
	defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (def, error) {
		var d def
		err := r.Scan(&d.part, &d.at)
		return d, err
	})
	if err != nil {
		return false, fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	for _, d := range defs {
		if strings.HasPrefix(d.part, "((hashtextextended(COALESCE(") && strings.Contains(d.part, t.Spec.KeyColumn) &&
			strings.Contains(d.part, "2147483647") && strings.HasSuffix(d.part, fmt.Sprintf("%% %d::bigint)", n)) &&
			sameExpr(d.at, t.AtExpr("")) {
			return true, nil
		}
	}
	return false, nil
}
