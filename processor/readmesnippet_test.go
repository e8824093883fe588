package processor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// markdownFiles are the pages of the manual, relative to this package: the front page, the guides, the
// changelog and the examples' READMEs.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "../CHANGELOG.md"}
	for _, pattern := range []string{"../docs/*.md", "../examples/*/README.md"} {
		matches, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, matches...)
	}
	return files
}

// snippet names a Go block of the manual and the function whose body it shows.
type snippet struct {
	file    string // the page, relative to this package
	heading string // the heading the block sits under, as written
	nth     int    // which Go block under that heading, from 0
	src     string // the Go file holding the function
	fn      string // the function
	// excerpt: the block shows parts of the body, not all of it. Each part (parts are separated by a
	// comment line starting with "// ...") must appear, whole and in the order given, in the body, and
	// each import line of the block must be an import of src.
	excerpt bool
}

// snippets lists every Go block of the manual. A block that is not listed fails
// TestREADMESnippetsCompile, so that no snippet goes unchecked.
var snippets = []snippet{
	{file: "../README.md", heading: "## The library in 30 lines", src: "readme_test.go", fn: "Example_library"},
	{file: "../docs/library.md", heading: "## An admin endpoint on the actions API", src: "../cursor/example_test.go", fn: "Example_adminEndpoint"},
	{file: "../docs/tracing.md", heading: "# Tracing", src: "../traceparent/example_test.go", fn: "placeBooking"},
	{file: "../docs/operating.md", heading: "## The web console", src: "../console/example_test.go", fn: "mount"},
	{file: "../docs/handlers.md", heading: "## Webhooks", nth: 0, src: "../handlers/webhook/example_test.go", fn: "ExampleSignatureScheme_stripe", excerpt: true},
	{file: "../docs/handlers.md", heading: "## Webhooks", nth: 1, src: "../handlers/webhook/example_test.go", fn: "ExampleSignatureScheme_standardWebhooks", excerpt: true},
}

// TestREADMESnippetsCompile keeps the Go snippets of the README, the guides under docs/ and the examples'
// READMEs identical to functions the compiler checks: the library in 30 lines (Example_library, after
// the record type, which example_test.go declares), the admin endpoint (cursor's Example_adminEndpoint),
// the outbox write with its trace context (traceparent's placeBooking), the console mounted on a mux
// (console's mount), and the receivers verifying a webhook's signature (excerpts of webhook's
// ExampleSignatureScheme_*). Every Go block of those pages must be one of them.
func TestREADMESnippetsCompile(t *testing.T) {
	t.Parallel()
	checked := map[string]bool{}
	for _, sn := range snippets {
		md, err := os.ReadFile(sn.file)
		require.NoError(t, err)
		blocks := goBlocks(string(md))[sn.heading]
		require.Greater(t, len(blocks), sn.nth, "%s has a Go block (number %d) under %q", sn.file, sn.nth+1, sn.heading)
		block := blocks[sn.nth]
		checked[fmt.Sprintf("%s\x00%s\x00%d", sn.file, sn.heading, sn.nth)] = true

		src, err := os.ReadFile(sn.src)
		require.NoError(t, err)
		fnBody := body(string(src), sn.fn)
		require.NotEmpty(t, fnBody, "%s declares %s", sn.src, sn.fn)
		if sn.excerpt {
			requireExcerpt(t, sn, block, string(src), fnBody)
			continue
		}
		if i := strings.Index(block, "}\n\n"); strings.HasPrefix(block, "type ") && i >= 0 {
			decl, err := os.ReadFile("example_test.go")
			require.NoError(t, err)
			require.True(t, strings.Contains(normalizedText(string(decl)), normalizedText(block[:i+1])),
				"the record type in %s under %q must be the one example_test.go declares", sn.file, sn.heading)
			block = block[i+3:]
		}
		require.Equal(t, normalize(block), normalize(fnBody),
			"the Go block in %s under %q must be the body of %s in %s", sn.file, sn.heading, sn.fn, sn.src)
	}

	for _, file := range markdownFiles(t) {
		md, err := os.ReadFile(file)
		require.NoError(t, err)
		for heading, blocks := range goBlocks(string(md)) {
			for i := range blocks {
				require.True(t, checked[fmt.Sprintf("%s\x00%s\x00%d", file, heading, i)],
					"the Go block number %d under %q in %s is checked by no test: add it to snippets, with the function it shows",
					i+1, heading, file)
			}
		}
	}
}

// requireExcerpt checks that block is an excerpt of fnBody (see snippet.excerpt).
func requireExcerpt(t *testing.T, sn snippet, block, src, fnBody string) {
	t.Helper()
	var parts [][]string
	var part []string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "import "):
			require.True(t, strings.Contains(src, "\t"+strings.TrimPrefix(l, "import ")+"\n"),
				"%s imports what the Go block in %s under %q imports: %s", sn.src, sn.file, sn.heading, l)
		case strings.HasPrefix(l, "// ..."):
			parts, part = append(parts, part), nil
		default:
			if l = stripComment(l); l != "" {
				part = append(part, l)
			}
		}
	}
	parts = append(parts, part)
	var have []string
	for _, l := range normalize(fnBody) {
		if l = stripComment(l); l != "" {
			have = append(have, l)
		}
	}
	rest := strings.Join(have, "\n") + "\n"
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		want := strings.Join(p, "\n") + "\n"
		i := strings.Index("\n"+rest, "\n"+want)
		require.GreaterOrEqual(t, i, 0,
			"the Go block in %s under %q shows lines that are not, in this order, in the body of %s in %s:\n%s",
			sn.file, sn.heading, sn.fn, sn.src, want)
		rest = rest[i+len(want):]
	}
}

// stripComment drops a line comment from a line of Go, unless the line is a comment and nothing else,
// which it drops whole. A "//" inside a string is left alone.
func stripComment(l string) string {
	inString := byte(0)
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case inString != 0:
			if c == '\\' && inString != '`' {
				i++
			} else if c == inString {
				inString = 0
			}
		case c == '"' || c == '`' || c == '\'':
			inString = c
		case c == '/' && i+1 < len(l) && l[i+1] == '/':
			return strings.TrimSpace(l[:i])
		}
	}
	return l
}

// goBlocks returns the ```go blocks of md under each heading, in order.
func goBlocks(md string) map[string][]string {
	out := map[string][]string{}
	heading := ""
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "```") {
			lang := strings.TrimPrefix(l, "```")
			var b strings.Builder
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				b.WriteString(lines[i] + "\n")
			}
			if lang == "go" {
				out[heading] = append(out[heading], b.String())
			}
			continue
		}
		if strings.HasPrefix(l, "#") {
			heading = l
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

// normalizedText is normalize joined by newlines.
func normalizedText(s string) string { return strings.Join(normalize(s), "\n") }

// markdownLink finds the target of an inline link or image: [text](target) or ![alt](target "title").
var markdownLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestMarkdownLinksResolve checks that every relative link of the README, the changelog, the guides and
// the examples' READMEs points to a file or directory that exists and, where it names a heading
// (#anchor) of a Markdown page, to a heading that page has, as GitHub spells its anchors.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{} // page -> its anchors
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		md, err := os.ReadFile(page)
		require.NoError(t, err)
		a := headingAnchors(string(md))
		anchors[page] = a
		return a
	}
	links := 0
	for _, file := range markdownFiles(t) {
		md, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range markdownLink.FindAllStringSubmatch(prose(string(md)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			page := file
			if path != "" {
				page = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				_, err := os.Stat(page)
				require.NoError(t, err, "%s links to %s, which does not exist", file, target)
			}
			if anchor != "" && strings.HasSuffix(page, ".md") {
				require.True(t, anchorsOf(page)[anchor], "%s links to %s: %s has no heading with that anchor", file, target, page)
			}
		}
	}
	require.Greater(t, links, 50, "the relative links of the manual are found")
}

// prose returns md without its fenced code blocks and inline code spans, where brackets are not links.
func prose(md string) string {
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(l + "\n")
		}
	}
	return inlineCode.ReplaceAllString(b.String(), "``")
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors GitHub gives the headings of md: lower case, spaces as dashes,
// punctuation other than dashes and underscores dropped, "-1", "-2" after a repeated one.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		for n := 1; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", b.String(), n)
		}
		out[anchor] = true
	}
	return out
}
