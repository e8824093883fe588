package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
)

// TestParseHorizon: the spellings --horizon takes, and a refusal that names them.
func TestParseHorizon(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]inordertype.Horizon{
		"": inordertype.HorizonAuto, "auto": inordertype.HorizonAuto,
		"clock": inordertype.HorizonClock, "writers": inordertype.HorizonWriters, "transactions": inordertype.HorizonTransactions,
	} {
		got, err := parseHorizon(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseHorizon("writer")
	require.ErrorContains(t, err, "none of auto, clock, writers and transactions")
}
