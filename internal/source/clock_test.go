package source

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAtExprMatchesTheIndexAsPrinted: the expression reads and partition indexes use is recognised in the
// form pg_get_indexdef prints an index's expression in (as the server printed it for the index AddClock
// builds), and a different expression is not.
func TestAtExprMatchesTheIndexAsPrinted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, createdAt, typ string
		clocked              bool
		printed              string
		same                 bool
	}{
		{"timestamptz", "created_at", "timestamptz", true, "COALESCE(inorder_at, created_at)", true},
		{"timestamp read as UTC", "created_at", "timestamp", true, "COALESCE(inorder_at, (created_at AT TIME ZONE 'UTC'::text))", true},
		{"a name that needs quotes", "Created At", "timestamptz", true, `COALESCE(inorder_at, "Created At")`, true},
		{"without the clock", "created_at", "timestamptz", false, "created_at", true},
		{"another column", "created_at", "timestamptz", true, "COALESCE(inorder_at, updated_at)", false},
		{"the clock alone", "created_at", "timestamptz", true, "inorder_at", false},
		{"the order turned", "created_at", "timestamptz", true, "COALESCE(created_at, inorder_at)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.same, sameExpr(tc.printed, atExpr("", tc.createdAt, tc.typ, tc.clocked)))
		})
	}
	require.Equal(t, `coalesce(s."inorder_at", s."created_at")`, atExpr("s.", "created_at", "timestamptz", true))
}
