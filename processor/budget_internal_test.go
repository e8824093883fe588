package processor

import (
	"github.com/inorder-dev/inorder/internal/setting"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNextLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		cur, got, limit, want int
		full                  bool
	}{
		{"a full read doubles the bound", 100, 100, 100, 200, true},
		{"up to the most", 4000, 4000, 4000, setting.DefaultMaxBatchSize, true},
		{"a short read goes back to the default", 800, 12, 800, setting.DefaultBatchSize, false},
		{"a read that took the last rows to the bound goes back too", 800, 800, 800, setting.DefaultBatchSize, false},
		{"cut by the budget, twice what came back", 800, 12, 800, 24, true},
		{"a record alone, twice that", 24, 1, 24, 2, true},
		{"cut by the budget at the most stays there", 4000, 3000, 4000, setting.DefaultMaxBatchSize, true},
		{"records growing smaller fill the bound and double it", 24, 24, 24, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, nextLimit(tc.cur, tc.got, tc.limit, tc.full))
		})
	}
}

func TestByteBudgetLearnsTheSizeRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		received, sized int64
		wantSized       int64 // the next read's bound in sized bytes, for a budget of 8 MiB
	}{
		{"before anything is learned, sized as received", 0, 0, 8 << 20},
		{"documents compressed twice", 4 << 20, 2 << 20, 4 << 20},
		{"too little to say", 40 << 10, 10 << 10, 8 << 20},
		{"text counted as sent never raises the bound", 1 << 20, 2 << 20, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := byteBudget{bytes: 8 << 20}
			b.learn(tc.received, tc.sized, 1<<20)
			got := b.bounds(100)
			require.Equal(t, tc.wantSized, got.sized)
			require.Equal(t, int64(8<<20), got.bytes)
			require.Equal(t, 100, got.limit)
		})
	}
}

func TestByteBudgetCountsSizesOnlyWhereRecordsMayPassIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		largests []int64 // the largest record of each read so far
		limit    int
		counted  bool // whether the next read counts sizes in its SQL
	}{
		{"the first read counts: nothing is known", nil, 100, true},
		{"small records at the most a batch holds", []int64{200}, setting.DefaultMaxBatchSize, false},
		{"records of a kilobyte at the most: 4 MB, half the budget", []int64{1 << 10}, setting.DefaultMaxBatchSize, false},
		{"records of 2 KiB at the most: past half the budget", []int64{2 << 10}, setting.DefaultMaxBatchSize, true},
		{"a document among them", []int64{200, 1 << 20}, 100, true},
		{"the document is remembered for a few reads", []int64{1 << 20, 200, 200, 200}, 100, true},
		{"and forgotten once its half-life has passed", append([]int64{1 << 20}, make12(200)...), 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := byteBudget{bytes: 8 << 20}
			for _, l := range tc.largests {
				b.learn(l*10, l*10, l)
			}
			got := b.bounds(tc.limit)
			require.Equal(t, tc.counted, got.sized > 0, "sized %d after %v", got.sized, tc.largests)
			require.Equal(t, int64(8<<20), got.bytes, "the received bytes are bounded either way")
		})
	}
}

func make12(v int64) []int64 {
	out := make([]int64, 12)
	for i := range out {
		out[i] = v
	}
	return out
}
