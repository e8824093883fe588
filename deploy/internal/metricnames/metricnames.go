// Package metricnames lets the deploy module's tests check that the metrics a Prometheus rule or a Grafana
// query names are ones inorder serves: the names of ops/testdata/metrics.txt, which a test of the root
// module keeps equal to what a running instance serves on /metrics.
package metricnames

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Served returns the metric names an instance serves, read from ops/testdata/metrics.txt.
func Served() (map[string]bool, error) {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("metricnames: no caller")
	}
	path := filepath.Join(filepath.Dir(here), "..", "..", "..", "ops", "testdata", "metrics.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			names[line] = true
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s lists no metric", path)
	}
	return names, nil
}

// Grafana's interval variables, which PromQL does not know, and what stands for them when parsing.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// Named parses expr with Prometheus's own PromQL parser (Grafana's interval variables replaced by
// durations) and returns the metric names its selectors name, sorted. A selector without a name
// ({job="x"}) or matching names by a pattern is an error: every metric must be named.
func Named(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaIntervals.Replace(expr))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var bad error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && (m.Type != labels.MatchEqual || name == "") {
				name = m.Value
				if m.Type != labels.MatchEqual {
					name = ""
				}
			}
		}
		if name == "" {
			bad = fmt.Errorf("%s: a selector that names no one metric", vs)
			return bad
		}
		seen[name] = true
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}
