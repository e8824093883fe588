package source

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
// expression, then the keyset columns. `inorder migrate --partition-index TABLE:KEY:N` creates it.
func PartitionIndexSQL(table, keyColumn, createdAtColumn, idColumn string, n int) string {
	parts := strings.Split(table, ".")
	name := parts[len(parts)-1] + "_" + keyColumn + "_p" + fmt.Sprint(n) + "_idx"
	return fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s, %s, %s)",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier(parts).Sanitize(), PartitionExpr(keyColumn, n),
		pgx.Identifier{createdAtColumn}.Sanitize(), pgx.Identifier{idColumn}.Sanitize())
}

// hasPartitionIndex looks for an index whose first column is the partition expression for n and whose
// next are the keyset columns. Postgres prints stored expressions in a normal form that depends on the
// key's type, so the expression is recognised by its parts.
func hasPartitionIndex(ctx context.Context, conn Querier, t *Table, n int) (bool, error) {
	rows, err := conn.Query(ctx, `
		SELECT pg_get_indexdef(i.indexrelid, 1, true)
		FROM pg_index i
		WHERE i.indrelid = $1 AND i.indpred IS NULL AND i.indnkeyatts >= 3 AND i.indkey[0] = 0
		  AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $2)
		  AND i.indkey[2] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $3)`,
		t.OID, t.Spec.CreatedAtColumn, t.Spec.IDColumn)
	if err != nil {
		return false, fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	for _, d := range defs {
		if strings.HasPrefix(d, "((hashtextextended(COALESCE(") && strings.Contains(d, t.Spec.KeyColumn) &&
			strings.Contains(d, "2147483647") && strings.HasSuffix(d, fmt.Sprintf("%% %d::bigint)", n)) {
			return true, nil
		}
	}
	return false, nil
}
