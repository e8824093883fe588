package ops_test

import (
	"bufio"
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/ops"
	"github.com/inorder-dev/inorder/processor"
)

var updateMetricNames = flag.Bool("update", false, "write testdata/metrics.txt from what a running instance serves")

// metricNamesFile lists, one a line, every inorder_* name a running instance serves on /metrics (a
// histogram as its _bucket, _sum and _count). The deploy module's tests read it: every metric that the
// Prometheus rules (deploy/prometheus/rules.yaml) and the Grafana dashboard (deploy/grafana/inorder.json)
// name must be in it.
const metricNamesFile = "testdata/metrics.txt"

// TestMetricNamesFileIsWhatAnInstanceServes runs a processor with its metrics, the lag watch and an xmin
// holder past the threshold, scrapes /metrics until every inorder_* series the registry describes is
// there, and requires testdata/metrics.txt to list exactly the names served (go test ./ops -run
// TestMetricNamesFile -update writes it) and the operating guide's table of series to name each.
func TestMetricNamesFileIsWhatAnInstanceServes(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	cfg.Handler = handlers.HandlerFunc[row](func(context.Context, *handlers.Record[row]) error { return nil })
	m := ops.NewMetrics()
	m.SetXminHoldAfter(500 * time.Millisecond)
	cfg.Observer = m.Observer()
	p, err := processor.New(cfg)
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	testrun.Start(t, m.WatchLag(db.Pool, 20*time.Millisecond))
	pgtest.HoldSnapshot(t, db.URL, "nightly-report")
	db.Exec(t, "INSERT INTO jobs SELECT FROM generate_series(1, 5)") // transaction ids go on past the holder's

	described := describedNames(t, m.Registry())
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)
	var served []string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		names, err := servedNames(srv.URL + "/metrics")
		require.NoError(c, err)
		served = names
		for _, name := range described {
			// A histogram is served as its _bucket, _sum and _count.
			served := slices.Contains(names, name) || slices.Contains(names, name+"_count")
			require.True(c, served, "%s: every series the registry describes is served once its process runs", name)
		}
	}, 30*time.Second, 20*time.Millisecond)

	want := strings.Join(served, "\n") + "\n"
	if *updateMetricNames {
		require.NoError(t, os.WriteFile(metricNamesFile, []byte(want), 0o644))
	}
	got, err := os.ReadFile(metricNamesFile)
	require.NoError(t, err)
	require.Equal(t, want, string(got),
		"%s is not what an instance serves: go test ./ops -run TestMetricNamesFile -update", metricNamesFile)

	// Every name served is a promise (docs/promises.md): the operating guide's table lists it.
	guide, err := os.ReadFile("../docs/operating.md")
	require.NoError(t, err)
	for _, name := range described {
		require.True(t, strings.Contains(string(guide), "| `"+name+"`") || strings.Contains(string(guide), ", `"+name+"`"),
			"docs/operating.md's table of series lists %s", name)
	}
}

// describedNames returns the inorder_* metric names the registry describes, whether or not a series of
// them exists yet.
func describedNames(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		// A Desc keeps its name to itself but prints it: Desc{fqName: "inorder_halted", ...}.
		s := d.String()
		_, rest, ok := strings.Cut(s, `fqName: "`)
		require.True(t, ok, s)
		name, _, ok := strings.Cut(rest, `"`)
		require.True(t, ok, s)
		if !strings.HasPrefix(name, "inorder_") {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// servedNames returns the names of the inorder_* samples url serves, sorted, each once.
func servedNames(url string) ([]string, error) {
	_, body, err := fetch(url)
	if err != nil {
		return nil, err
	}
	var names []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "inorder_") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names), sc.Err()
}
