package handlers_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheLibraryGuideNamesEverySink: docs/library.md names every handler package, so that its list cannot
// drift from the tree as sinks are added.
func TestTheLibraryGuideNamesEverySink(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../docs/library.md")
	require.NoError(t, err)
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "testdata" {
			continue
		}
		require.Contains(t, string(guide), "`handlers/"+e.Name()+"`", "docs/library.md's list of packages")
	}
}
