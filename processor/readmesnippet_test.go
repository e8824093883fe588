package processor_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMESnippetsCompile keeps the README's Go snippets identical to Example functions, which the
// compiler checks: the library in 30 lines (Example_library, after the record type) and the admin
// endpoint (cursor's Example_adminEndpoint) and the outbox write with its trace context (traceparent's
// placeBooking).
func TestREADMESnippetsCompile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	blocks := goBlocks(string(readme))
	for _, tc := range []struct{ heading, file, fn string }{
		{"## The library in 30 lines", "readme_test.go", "Example_library"},
		{"### An admin endpoint on the actions API", "../cursor/example_test.go", "Example_adminEndpoint"},
		{"### Tracing", "../traceparent/example_test.go", "placeBooking"},
		{"### The web console", "../console/example_test.go", "mount"},
	} {
		snippet, ok := blocks[tc.heading]
		require.True(t, ok, "the README has a Go block under %q", tc.heading)
		if i := strings.Index(snippet, "}\n\n"); strings.HasPrefix(snippet, "type ") && i >= 0 {
			snippet = snippet[i+3:] // the record type, declared beside the example
		}
		src, err := os.ReadFile(tc.file)
		require.NoError(t, err)
		require.Equal(t, normalize(snippet), normalize(body(string(src), tc.fn)),
			"the README's block under %q must be the body of %s in %s", tc.heading, tc.fn, tc.file)
	}
}

// goBlocks returns the first ```go block after each heading of md.
func goBlocks(md string) map[string]string {
	out := map[string]string{}
	heading := ""
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") {
			heading = l
			continue
		}
		if l == "```go" {
			var b strings.Builder
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				b.WriteString(lines[i] + "\n")
			}
			if _, seen := out[heading]; !seen {
				out[heading] = b.String()
			}
		}
	}
	return out
}

// body returns the body of function fn in src.
func body(src, fn string) string {
	start := strings.Index(src, "func "+fn+"(")
	if start < 0 {
		return ""
	}
	open := strings.Index(src[start:], "{\n")
	if open < 0 {
		return ""
	}
	rest := src[start+open+2:]
	end := strings.Index(rest, "\n}\n")
	if end < 0 {
		return ""
	}
	return rest[:end]
}

// normalize drops indentation and blank lines.
func normalize(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
