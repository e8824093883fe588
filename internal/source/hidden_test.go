package source

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
)

// TestHiddenColumnsDecodeAsPgxScansThem: the hidden columns, decoded without pgx's scan of each into a
// destination of its own, give what that scan gives, in either format, with the insert clock's created_at
// NULL or of either time type, and fail, naming the column, where it fails.
func TestHiddenColumnsDecodeAsPgxScansThem(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	stamped := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	enc := func(oid uint32, format int16, v any) []byte {
		b, err := m.Encode(oid, format, v, nil)
		require.NoError(t, err)
		return b
	}
	fd := func(name string, oid uint32, format int16) pgconn.FieldDescription {
		return pgconn.FieldDescription{Name: name, DataTypeOID: oid, Format: format}
	}
	clocked := &Table{Horizon: inordertype.HorizonClock, Spec: inordertype.Source{TraceColumn: "traceparent"}}
	plain := &Table{Horizon: inordertype.HorizonWriters}
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		for _, stampedOID := range []uint32{pgtype.TimestamptzOID, pgtype.TimestampOID} {
			s := clocked.HiddenScanner(true, m)
			fds := []pgconn.FieldDescription{fd("inorder_created_at", pgtype.TimestamptzOID, format),
				fd("inorder_id", pgtype.TextOID, format), fd("inorder_key", pgtype.TextOID, format),
				fd("inorder_stamped", stampedOID, format), fd("inorder_traceparent", pgtype.TextOID, format),
				fd("inorder_tracestate", pgtype.TextOID, format), fd("inorder_size", pgtype.Int4OID, format),
				fd("inorder_more", pgtype.BoolOID, format), fd("payload", pgtype.TextOID, format)}
			row := [][]byte{enc(pgtype.TimestamptzOID, format, at), []byte("42"), []byte("k1"),
				enc(stampedOID, format, stamped), []byte("00-tp"), []byte("ts"), enc(pgtype.Int4OID, format, int32(300)),
				enc(pgtype.BoolOID, format, true), []byte("the record")}
			var h Hidden
			require.NoError(t, s.Scan(fds, row, &h))
			require.Equal(t, Hidden{Position: inordertype.Position{CreatedAt: at, ID: "42"}, Key: "k1", CreatedAt: stamped,
				Traced: true, TraceParent: "00-tp", TraceState: "ts", Size: 300, More: true}, h)
			require.Equal(t, time.UTC, h.Position.CreatedAt.Location())

			// The next row: the clock's created_at NULL, no key, no trace context, a row following none.
			row[2], row[3], row[4], row[5], row[7] = nil, nil, nil, nil, enc(pgtype.BoolOID, format, false)
			require.NoError(t, s.Scan(fds, row, &h))
			require.Equal(t, Hidden{Position: inordertype.Position{CreatedAt: at, ID: "42"}, Size: 300}, h)

			// A position's time at infinity or NULL is pgx's error for a time, naming the column.
			row[0] = enc(pgtype.TimestamptzOID, format, pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true})
			require.ErrorContains(t, s.Scan(fds, row, &h), "column inorder_created_at: ")
			row[0] = nil
			require.ErrorContains(t, s.Scan(fds, row, &h), "column inorder_created_at: ")
		}
		// Without the clock, the position's time is created_at's, here a timestamp.
		s := plain.HiddenScanner(false, m)
		fds := []pgconn.FieldDescription{fd("inorder_created_at", pgtype.TimestampOID, format),
			fd("inorder_id", pgtype.TextOID, format), fd("inorder_key", pgtype.TextOID, format)}
		var h Hidden
		require.NoError(t, s.Scan(fds, [][]byte{enc(pgtype.TimestampOID, format, stamped), []byte("7"), nil}, &h))
		require.Equal(t, Hidden{Position: inordertype.Position{CreatedAt: stamped, ID: "7"}, CreatedAt: stamped}, h)
	}
}
