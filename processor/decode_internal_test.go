package processor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestGenericRowsAreDecodedAsPgxDecodesThem: a generic read's values, decoded with plans made once and
// cut from slabs shared by rows, are what pgx's Rows.Values gives for every row, NULLs, infinities and
// values wider than a slab's row included, and a handler that appends to one row's values changes no other.
func TestGenericRowsAreDecodedAsPgxDecodesThem(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	// Every type the decoders plan for, one the codec decodes and one pgx does not know (a cast to text as
	// a generic read makes), and a json column as text; every third row NULL, the odd ones at infinity.
	const query = `SELECT g::int2 AS a, g::int4 AS b, g::int8 * 1000000007 AS c, g / 3.0::float8 AS d, g % 2 = 0 AS e,
		'row ' || g AS f, ('v' || g)::varchar AS h,
		CASE WHEN g % 2 = 1 THEN 'infinity'::timestamptz ELSE '2026-01-02 03:04:05.123456+00'::timestamptz + g * interval '1 s' END AS i,
		'2026-01-02 03:04:05'::timestamp + g * interval '1 ms' AS j, decode(lpad(to_hex(g), 4, '0'), 'hex') AS k,
		(g * interval '1 minute')::text AS l, json_build_object('g', g, 's', '<&>')::text AS m,
		CASE WHEN g = 7 THEN repeat('x', 5000) END AS n
		FROM generate_series(1, 400) g`
	nulls := `SELECT NULL::int2 AS a, NULL::int4 AS b, NULL::int8 AS c, NULL::float8 AS d, NULL::bool AS e, NULL::text AS f,
		NULL::varchar AS h, NULL::timestamptz AS i, NULL::timestamp AS j, NULL::bytea AS k, NULL::text AS l, NULL::text AS m,
		NULL::text AS n`
	want := map[bool][][]any{}
	got := map[bool][]handlers.Row{}
	for _, q := range []string{query, nulls} {
		rows, err := db.Pool.Query(ctx, q)
		require.NoError(t, err)
		w, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]any, error) { return row.Values() })
		require.NoError(t, err)
		want[q == nulls] = w

		scan := rowScanner([]int{11})
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		rows, err = conn.Conn().Query(ctx, q)
		require.NoError(t, err)
		g, err := pgx.CollectRows(rows, scan)
		conn.Release()
		require.NoError(t, err)
		got[q == nulls] = g
	}
	for null, rows := range got {
		require.Len(t, rows, len(want[null]))
		for i, r := range rows {
			w := want[null][i]
			if s, ok := w[11].(string); ok {
				w[11] = json.RawMessage(s)
			}
			require.Equal(t, w, r.Values, "row %d", i)
			require.Equal(t, []string{"a", "b", "c", "d", "e", "f", "h", "i", "j", "k", "l", "m", "n"}, r.Columns)
		}
	}
	rows := got[false]
	before := append([]any(nil), rows[1].Values...)
	_ = append(rows[0].Values, "appended by a handler")
	require.Equal(t, before, rows[1].Values, "an append to one row's values reached the next")
}
