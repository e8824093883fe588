package prometheus_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// step is how often the tests scrape and evaluate, as a Prometheus with a 30s interval would.
const step = 30 * time.Second

// start is the time the tests' histories begin.
var start = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// series is one time series of a test's history: its labels and a value per step, negative where it was
// not scraped (the target not there yet, or gone).
type series struct {
	labels labels.Labels
	values []float64
}

// history is what a Prometheus would hold: series scraped every step from start.
type history []series

// add appends a series valued v for the steps in [from, to) (minutes from start), absent elsewhere.
func (h *history) add(lset labels.Labels, from, to int, v float64) {
	n := int(time.Duration(to) * time.Minute / step)
	values := make([]float64, n)
	for i := range values {
		values[i] = -1
		if i >= int(time.Duration(from)*time.Minute/step) {
			values[i] = v
		}
	}
	*h = append(*h, series{labels: lset, values: values})
}

// Querier returns the history's samples as storage.Querier, for Prometheus's own query engine.
func (h history) Querier(_, _ int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		var out []storage.Series
		for _, s := range h {
			if !matches(s.labels, ms) {
				continue
			}
			var samples []chunks.Sample
			for i, v := range s.values {
				if v >= 0 {
					samples = append(samples, floatSample{t: start.Add(time.Duration(i) * step).UnixMilli(), f: v})
				}
			}
			if len(samples) > 0 {
				out = append(out, storage.NewListSeries(s.labels, samples))
			}
		}
		sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
		return &seriesSet{list: out, at: -1}
	}}, nil
}

func matches(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

type seriesSet struct {
	list []storage.Series
	at   int
}

func (s *seriesSet) Next() bool                      { s.at++; return s.at < len(s.list) }
func (s *seriesSet) At() storage.Series              { return s.list[s.at] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }

// loadRules parses a rules file's text as Prometheus loads it.
func loadRules(t *testing.T, text string) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.Parse([]byte(text), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// firing evaluates every alerting rule over the history at each step up to at minutes from start, as
// Prometheus's rule manager would (an expression's result pending until it has lasted the rule's for),
// and returns the alerts firing at the end, each as its name and labels ("InorderHalted{...}").
func firing(t *testing.T, rules []rulefmt.Rule, h history, at int) []string {
	t.Helper()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	var out []string
	for _, r := range rules {
		since := map[string]time.Time{} // an active alert's labels, and when it became active
		var now []string
		for ts := start; !ts.After(start.Add(time.Duration(at) * time.Minute)); ts = ts.Add(step) {
			q, err := engine.NewInstantQuery(context.Background(), h, nil, r.Expr, ts)
			require.NoError(t, err, r.Alert)
			res := q.Exec(context.Background())
			require.NoError(t, res.Err, r.Alert)
			vec, err := res.Vector()
			require.NoError(t, err, r.Alert)
			active := map[string]time.Time{}
			now = now[:0]
			for _, s := range vec {
				key := s.Metric.String()
				first, ok := since[key]
				if !ok {
					first = ts
				}
				active[key] = first
				if ts.Sub(first) >= time.Duration(r.For) {
					now = append(now, r.Alert+key)
				}
			}
			since = active
			q.Close()
		}
		out = append(out, now...)
	}
	slices.Sort(out)
	return out
}

// chartRules are the rules as the Helm chart renders them for release inorder in namespace payments
// (the chart's tests require its PrometheusRule to be exactly this).
func chartRules(t *testing.T, file string) []rulefmt.Rule {
	t.Helper()
	return loadRules(t, strings.ReplaceAll(file, `job="inorder"`, `namespace="payments", job="inorder"`))
}

func lbls(kv ...string) labels.Labels { return labels.FromStrings(kv...) }

// TestAlertsWithEveryInstanceGone: with no series at all, as when every pod of the release is gone
// (nothing is scraped, so inorder_cursor_locked and every other series of inorder are gone too),
// InorderDown fires after its 5 minutes, and InorderNotRunning, which needs a series to compare with 0,
// cannot. The same once instances that ran are gone: their series go stale after 5 minutes and
// InorderDown fires 5 minutes later.
func TestAlertsWithEveryInstanceGone(t *testing.T) {
	t.Parallel()
	file := readRules(t)
	for name, rules := range map[string][]rulefmt.Rule{"rules.yaml": loadRules(t, file), "the chart's": chartRules(t, file)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Empty(t, firing(t, rules, nil, 4), "not before its for")
			require.Equal(t, []string{"InorderDown{}"}, firing(t, rules, nil, 6), "no series at all")

			var h history
			for _, pod := range []string{"inorder-a", "inorder-b"} {
				h.add(lbls("__name__", "up", "job", "inorder", "namespace", "payments", "pod", pod), 0, 20, 1)
				h.add(lbls("__name__", "inorder_cursor_locked", "job", "inorder", "namespace", "payments", "pod", pod,
					"process", "booking_sms"), 0, 20, map[string]float64{"inorder-a": 1, "inorder-b": 0}[pod])
			}
			require.Empty(t, firing(t, rules, h, 19), "both pods up, one owning the process")
			require.Empty(t, firing(t, rules, h, 28), "gone at 20: stale at 25, not yet 5 minutes")
			require.Equal(t, []string{"InorderDown{}"}, firing(t, rules, h, 31), "every pod gone")
		})
	}
}

// TestAlertsKeepDeploymentsApart: two deployments of inorder (namespaces payments and billing) scraped by
// one Prometheus, each with a process named booking_sms. A halt in billing is an alert of billing alone,
// and none of payments; a process no instance owns in billing is not hidden by payments' owner (summed
// across both, it would be); the chart's rules for payments see payments alone.
func TestAlertsKeepDeploymentsApart(t *testing.T) {
	t.Parallel()
	var h history
	for ns, locked := range map[string]float64{"payments": 1, "billing": 0} {
		halted := map[string]float64{"payments": 0, "billing": 1}[ns]
		h.add(lbls("__name__", "up", "job", "inorder", "namespace", ns, "pod", ns+"-a"), 0, 30, 1)
		h.add(lbls("__name__", "inorder_cursor_locked", "job", "inorder", "namespace", ns, "pod", ns+"-a", "process", "booking_sms"), 0, 30, locked)
		h.add(lbls("__name__", "inorder_halted", "job", "inorder", "namespace", ns, "pod", ns+"-a", "process", "booking_sms"), 0, 30, halted)
	}
	// A job of something else that happens to serve a series of the same name.
	h.add(lbls("__name__", "inorder_halted", "job", "other", "namespace", "payments", "pod", "other-a", "process", "booking_sms"), 0, 30, 1)

	file := readRules(t)
	require.Equal(t, []string{
		`InorderHalted{job="inorder", namespace="billing", process="booking_sms"}`,
		`InorderNotRunning{job="inorder", namespace="billing", process="booking_sms"}`,
	}, firing(t, loadRules(t, file), h, 29))
	require.Empty(t, firing(t, chartRules(t, file), h, 29), "payments' rules see payments alone")
}

func readRules(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("rules.yaml")
	require.NoError(t, err)
	return string(data)
}
