// Package prometheus holds inorder's Prometheus alerting rules (rules.yaml), which the Helm chart ships as a
// PrometheusRule and docs/operating.md explains; its test parses them with Prometheus's own parser.
package prometheus_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/deploy/internal/metricnames"
)

// TestRulesParseAndNameServedMetrics loads rules.yaml as Prometheus loads a rules file (unknown fields
// refused, every expression and annotation template parsed) and requires every metric an expression
// names to be one a running instance serves (or up), every selector to read the scrape job inorder and
// every aggregation to keep namespaces and jobs apart, every alert to say how urgent it is, and the
// operating guide to point at this file rather than hold a copy.
func TestRulesParseAndNameServedMetrics(t *testing.T) {
	t.Parallel()
	groups, errs := rulefmt.ParseFile("rules.yaml", false, model.UTF8Validation,
		parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	served, err := metricnames.Served()
	require.NoError(t, err)

	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "only alerts: %s", r.Expr)
			alerts++
			names, err := metricnames.Named(r.Expr)
			require.NoError(t, err, r.Alert)
			require.NotEmpty(t, names, r.Alert)
			for _, n := range names {
				if n == "up" {
					continue // Prometheus's own, one per target it scrapes
				}
				require.True(t, served[n], "%s names %s, which inorder does not serve (ops/testdata/metrics.txt)", r.Alert, n)
			}
			require.Equal(t, len(names), strings.Count(r.Expr, `{job="inorder"}`),
				"%s: every selector reads the scrape job inorder, which the chart replaces with its release's", r.Alert)
			if !strings.HasPrefix(r.Expr, "absent(") {
				require.Contains(t, r.Expr, "by (namespace, job", "%s keeps deployments apart", r.Alert)
			}
			require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
	require.GreaterOrEqual(t, alerts, 9)

	guide, err := os.ReadFile("../../docs/operating.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(guide), "](../deploy/prometheus/rules.yaml)"), "docs/operating.md links the rules")
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.True(t, strings.Contains(string(guide), "`"+r.Alert+"`"), "docs/operating.md says what %s means", r.Alert)
		}
	}
	require.False(t, strings.Contains(string(guide), "- alert: "), "docs/operating.md holds no copy of the rules: one copy, this file")
}
