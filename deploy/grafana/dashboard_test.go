// Package grafana holds inorder's Grafana dashboard (inorder.json), which the Helm chart ships in a
// ConfigMap for Grafana's dashboard sidecar; its test parses every query with Prometheus's own parser.
package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/deploy/internal/metricnames"
)

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// labelValues is Grafana's variable query label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?, *[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// TestDashboardQueriesNameServedMetrics parses every query of the dashboard (its panels' and its
// variables') with Prometheus's PromQL parser and requires every metric they name to be one a running
// instance serves; and it requires the dashboard to show what an operator looks at: the streams, lag,
// rate, halted, parked, sink unavailable, in flight and the held horizon.
func TestDashboardQueriesNameServedMetrics(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("inorder.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	require.Equal(t, "inorder", d.UID)
	served, err := metricnames.Served()
	require.NoError(t, err)

	named := map[string]bool{}
	check := func(where, expr string) {
		names, err := metricnames.Named(expr)
		require.NoError(t, err, "%s: %s", where, expr)
		require.NotEmpty(t, names, "%s: %s", where, expr)
		for _, n := range names {
			require.True(t, served[n], "%s names %s, which inorder does not serve (ops/testdata/metrics.txt)", where, n)
			named[n] = true
		}
	}
	var walk func([]panel)
	queries := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotNil(t, p.Datasource, p.Title)
			require.Equal(t, "${datasource}", p.Datasource.UID, "%s: the data source the viewer picks", p.Title)
			require.NotEmpty(t, p.Targets, p.Title)
			for _, tg := range p.Targets {
				check(p.Title, tg.Expr)
				queries++
			}
		}
	}
	walk(d.Panels)
	require.Greater(t, queries, 10)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: %s", v.Name, v.Definition)
		check("variable "+v.Name, m[1]+m[2])
	}

	for _, want := range []string{
		"inorder_connected",             // streams
		"inorder_lag_seconds",           // lag
		"inorder_records_handled_total", // rate
		"inorder_halted",
		"inorder_parked_keys",
		"inorder_sink_unavailable",
		"inorder_in_flight",
		"inorder_xmin_held_seconds", // the held horizon
		"inorder_xmin_holder",
	} {
		require.True(t, named[want], "the dashboard shows %s", want)
	}
}
