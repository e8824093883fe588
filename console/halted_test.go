package console_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
)

// excerptOf is the content cell of a halted record on a process page.
var excerptOf = regexp.MustCompile(`(?s)<code class="excerpt">(.*?)</code>`)

// The read-only page of a halted stream is what someone on call reads before acting elsewhere: the
// halted record's key and the start of its content, escaped and short, the commands inorder status prints
// to copy, and no next attempt for a record the sink refused, which would read as if it might pass by
// itself. It still shows no form.
func TestReadOnlyPageShowsTheHaltedRecordAndTheCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Record 3, the one refused, carries markup in its key and a long note; the process reads neither
	// column by name, so the change does not touch it.
	b.db.Exec(t, `ALTER TABLE payments ADD COLUMN note text;
		UPDATE payments SET customer = '<b>vip</b> & co', note = repeat('z', 5000) WHERE id = 3`)
	srv := b.serve(t, console.Config{})
	code, page := get(t, http.DefaultClient, srv.URL+"/process/payments")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "<form", "read-only")

	require.Contains(t, page, "Halted on record <code>3</code>")
	require.Contains(t, page, "<code>&lt;b&gt;vip&lt;/b&gt; &amp; co</code>", "the key, escaped")
	require.NotContains(t, page, "<b>vip</b>")
	m := excerptOf.FindStringSubmatch(page)
	require.NotNil(t, m, "the content")
	require.Contains(t, m[1], `&#34;id&#34;: 3`)
	require.True(t, strings.HasSuffix(m[1], "…"), "cut: %s", m[1])
	require.Less(t, strings.Count(m[1], "z"), 300, "an excerpt, not a 5,000-character note")

	require.Contains(t, page, "<pre class=\"cmd\">inorder retry --process payments</pre>")
	require.Contains(t, page, "<pre class=\"cmd\">inorder skip --process payments --record 3 --reason '...'</pre>")
	require.Contains(t, page, "Refused by the sink")
	require.NotContains(t, page, "next attempt", "a refused record has no next attempt to wait for")
	require.NotContains(t, page, "refused for good")
}

// A process with a name a shell would split gets its commands quoted, so that they paste as they are.
func TestCommandsQuoteANameAShellWouldSplit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runProcess(t, "pay it's")
	srv := b.serve(t, console.Config{})
	code, page := get(t, http.DefaultClient, srv.URL+"/process/pay%20it%27s")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `inorder retry --process &#39;pay it&#39;\&#39;&#39;s&#39;</pre>`)
}

// The lag chart comes from what the console measured while it ran (Run), not from the page's own views:
// the first view of a page already has a line, with its axes and units.
func TestTheLagChartComesFromTheConsolesHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := console.New(console.Config{Pool: b.db.Pool, SampleInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	testrun.Start(t, c.Run)
	require.Eventually(t, func() bool { return console.SamplesOf(c, "payments") >= 5 }, 20*time.Second, 10*time.Millisecond,
		"Run keeps a sample of every process each interval")

	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	_, page := get(t, http.DefaultClient, srv.URL+"/process/payments")
	svg := regexp.MustCompile(`(?s)<svg class="chart".*?</svg>`).FindString(page)
	require.NotEmpty(t, svg)
	points := regexp.MustCompile(`points="([^"]*)"`).FindStringSubmatch(svg)
	require.NotNil(t, points, "a line, at the first view: %s", svg)
	require.GreaterOrEqual(t, len(strings.Fields(points[1])), 5)
	for _, label := range []string{">rows behind<", ">now<", ">−30m<", ">−60m<", ">0<"} {
		require.Contains(t, svg, label, "the axes and their units")
	}
	_, overview := get(t, http.DefaultClient, srv.URL+"/")
	require.Contains(t, overview, `aria-label="rows behind over the last hour"`)
}
