package harness

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheListNamesEveryHarness: the package documentation names every folder of this one, and nothing
// else, so that the list cannot drift from the tree.
func TestTheListNamesEveryHarness(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^//   - ([a-z, ]+):`).FindAllStringSubmatch(string(doc), -1) {
		for _, name := range strings.Split(m[1], ",") {
			listed = append(listed, strings.TrimSpace(name))
		}
	}
	sort.Strings(listed)
	require.Equal(t, dirs, listed)
}
