package jsondoc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/jsondoc"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDocumentsHaveTheSizeAskedAndCompressAsDocumentsDo: a document is within 3% of the size asked, as
// jsonb prints it, two orders differ, and stored in a table one takes about half its size (pglz).
func TestDocumentsHaveTheSizeAskedAndCompressAsDocumentsDo(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	db.Exec(t, jsondoc.FunctionSQL)
	db.Exec(t, `CREATE TABLE docs AS SELECT n, jsondoc(n, $1) AS doc FROM generate_series(1, 2) n`, 256<<10)
	var text, stored int
	var differ bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT min(octet_length(doc::text)), max(pg_column_size(doc)), min(doc::text) <> max(doc::text) FROM docs`).
		Scan(&text, &stored, &differ))
	require.InDelta(t, 256<<10, text, 0.03*(256<<10))
	require.True(t, differ, "two orders are alike")
	ratio := float64(text) / float64(stored)
	require.True(t, ratio > 1.6 && ratio < 2.6, "compressed %.2fx: %d bytes stored for %d", ratio, stored, text)
}
