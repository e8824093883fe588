package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readmeDefault finds a flag and the default the manual gives it in parentheses: "`--batch-size` (100)",
// "`--idle-timeout`\n(60s)", "`--checkpoint record|batch` (record)".
var readmeDefault = regexp.MustCompile("`--([a-z-]+)[^`]*`\\s+\\((?:default )?`?([^`);:, \\n]+)")

// runFlagsParagraph finds the paragraph of the manual that lists the run flags, in the README or in one
// of the guides under docs/, whichever holds it (the CLI guide, docs/cli.md, today).
var runFlagsParagraph = regexp.MustCompile("(?s)`run` flags:.*?per handler:")

// TestREADMEGivesTheFlagsTheirDefaults reads every default the manual's list of `run` flags states and
// compares it with the flag's own, which comes from the library's exported defaults: a default changed in
// one place and not the others fails here.
func TestREADMEGivesTheFlagsTheirDefaults(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	var para []byte
	for _, page := range append([]string{"../../README.md"}, pages...) {
		md, err := os.ReadFile(page)
		require.NoError(t, err)
		if p := runFlagsParagraph.Find(md); p != nil {
			require.Nil(t, para, "one page of the manual lists the run flags; %s does too", page)
			para = p
		}
	}
	require.NotNil(t, para, "the README or a guide under docs/ lists the run flags")
	fs := newFlagSet("run", io.Discard)
	var f runFlags
	f.register(fs)
	checked := 0
	for _, m := range readmeDefault.FindAllStringSubmatch(string(para), -1) {
		name, said := m[1], m[2]
		fl := fs.Lookup(name)
		if fl == nil || fl.DefValue == "" || said == "default" {
			continue // another command's flag, a default worked out at run time, or the handler chosen by default
		}
		checked++
		switch v := fl.Value.(flag.Getter).Get().(type) {
		case time.Duration:
			d, err := time.ParseDuration(said)
			require.NoError(t, err, "--%s: the manual says (%s)", name, said)
			require.Equal(t, v, d, "--%s: the manual says %s, the flag defaults to %s", name, said, fl.DefValue)
		case int:
			n, err := strconv.Atoi(said)
			require.NoError(t, err, "--%s: the manual says (%s)", name, said)
			require.Equal(t, v, n, "--%s: the manual says %s, the flag defaults to %s", name, said, fl.DefValue)
		default:
			require.Equal(t, fl.DefValue, said, "--%s: the manual says %s", name, said)
		}
	}
	require.GreaterOrEqual(t, checked, 10, "the manual's run flags with their defaults are found")
}
