package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
)

// TestLateWatch: spans that go on from one another within a second join while within the budget; they
// come due lateAfter after their last delivery, a count's worth at a time; past lateKept the oldest go
// unchecked, and are counted as such.
func TestLateWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pos := func(i int) inordertype.Position {
		return inordertype.Position{CreatedAt: t0.Add(time.Duration(i) * time.Millisecond), ID: string(rune('a' + i%26))}
	}
	for _, tc := range []struct {
		name    string
		adds    []int // records of each batch, one position further each, delivered 100ms apart
		gap     time.Duration
		after   time.Duration // when due is asked, after the last delivery
		spans   int           // spans kept after the adds
		due     []int64       // the rows of each span due
		dropped int64
	}{
		{name: "batches within a second join", adds: []int{10, 10, 10}, gap: 100 * time.Millisecond, after: lateAfter,
			spans: 1, due: []int64{30}},
		{name: "batches seconds apart stay apart", adds: []int{10, 10}, gap: 2 * time.Second, after: lateAfter,
			spans: 2, due: []int64{10, 10}},
		{name: "not due before lateAfter", adds: []int{10}, after: lateAfter - time.Millisecond, spans: 1},
		{name: "joined only within the budget", adds: []int{lateBudget - 5, 10}, gap: time.Millisecond, after: lateAfter,
			spans: 2, due: []int64{lateBudget - 5}},
		{name: "a batch over the budget is counted alone", adds: []int{lateBudget + 1}, after: lateAfter,
			spans: 1, due: []int64{lateBudget + 1}},
		{name: "past lateKept the oldest go unchecked", adds: make([]int, lateKept+2), gap: 2 * time.Second,
			after: -time.Hour, spans: lateKept, dropped: 2},
		{name: "nothing delivered, nothing kept", adds: []int{0}, after: lateAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := lateWatch{after: lateAfter}
			at, from := t0, inordertype.Position{}
			for i, n := range tc.adds {
				if tc.name == "past lateKept the oldest go unchecked" {
					n = 1
				}
				if i > 0 {
					at = at.Add(tc.gap)
				}
				w.add(from, pos(i+1), n, at)
				if n > 0 {
					from = pos(i + 1)
				}
			}
			require.Len(t, w.spans, tc.spans)
			require.Equal(t, tc.dropped, w.dropped)
			var got []int64
			for _, s := range w.due(at.Add(tc.after)) {
				got = append(got, s.n)
			}
			require.Equal(t, tc.due, got)
		})
	}
}
