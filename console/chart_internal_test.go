package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The y axis ends at a round number at least the hour's most, written short.
func TestTheChartsAxisIsRound(t *testing.T) {
	t.Parallel()
	for rows, want := range map[int64]int64{0: 1, 1: 1, 3: 5, 5: 5, 43: 50, 101: 200, 999_999: 1_000_000} {
		require.Equal(t, want, niceCeiling(rows), "%d rows", rows)
	}
	for n, want := range map[int64]string{0: "0", 950: "950", 1000: "1k", 1200: "1.2k", 3_000_000: "3M"} {
		require.Equal(t, want, count(n))
	}
}

// A chart places its samples by time (the newest at the right, an hour ago at the left) and by rows
// against the axis, and marks the latest.
func TestTheChartPlacesItsSamples(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	svg := drawChart([]sample{{At: now.Add(-30 * time.Minute), Rows: 0}, {At: now, Rows: 40}}, 646, 140, now)
	// The plot runs from x 46 to 640 and from y 124 (0 rows) to 12 (50 rows).
	require.Contains(t, svg, `points="343.0,124.0 640.0,34.4 "`)
	require.Contains(t, svg, `<circle cx="640.0" cy="34.4"`)
	require.Contains(t, svg, `>50</text>`)
	require.Contains(t, svg, `>25</text>`)
	require.Equal(t, 1, strings.Count(svg, ">now<"))
	require.Contains(t, drawChart(nil, 646, 140, now), "no sample yet")
}
