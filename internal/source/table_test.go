package source

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]timestampKind{
		"":                  kindNone,
		"clock_timestamp()": kindInsert,
		"(clock_timestamp())::timestamp without time zone": kindInsert,
		"now()":                                   kindTransaction,
		"CURRENT_TIMESTAMP":                       kindTransaction,
		"transaction_timestamp()":                 kindTransaction,
		"statement_timestamp()":                   kindTransaction,
		"LOCALTIMESTAMP":                          kindTransaction,
		"(now() + '00:00:01'::interval)":          kindOther,
		"(clock_timestamp() - '1 day'::interval)": kindOther,
		"'2020-01-01 00:00:00+00'::timestamp with time zone": kindOther,
	} {
		require.Equal(t, want, classify(expr), "%q", expr)
	}
}
