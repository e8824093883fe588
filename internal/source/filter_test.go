package source

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLexFilter: what could take a filter outside the parentheses a read puts it in is refused, and the
// same characters inside string constants and quoted identifiers are not.
func TestLexFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ filter, refused string }{
		{"type LIKE 'payment.%'", ""},
		{"type = 'a;b' AND note = 'it''s (fine'", ""},
		{`"we;ird)" = 'x'`, ""},
		{`E'it\'s ) fine' = type`, ""},
		{"payload->>'country' IN ('DE', 'FR')", ""},
		{"true; DELETE FROM outbox", "statement separator"},
		{"type = 'x' -- comment", "comment"},
		{"type = 'x' /* comment */", "comment"},
		{"true) OR (true", "closes a parenthesis"},
		{"(true", "leaves a parenthesis open"},
		{"type = $$x$$", "dollar sign"},
		{"type = $1", "dollar sign"},
		{"type = 'x", "string constant is not terminated"},
		{`E'x\' = type`, "string constant is not terminated"},
		{`"type = 'x'`, "quoted identifier is not terminated"},
	} {
		err := lexFilter(tc.filter)
		if tc.refused == "" {
			require.NoError(t, err, tc.filter)
			continue
		}
		require.ErrorContains(t, err, tc.refused, tc.filter)
	}
}
