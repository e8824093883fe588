package processor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// TestCompletion: the executor builds the whole completion of a failing record, the value the store writes
// as it is: the attempts counted on from the cursor row's for the same record, the wait before the next
// attempt (the wait written here with no jitter), the verdict (an outage neither halts nor counts as a refusal for good), and whether the key
// parks.
func TestCompletion(t *testing.T) {
	t.Parallel()
	e := executor[int]{retryMin: time.Second, retryMax: time.Minute}
	transient := sinkStatus(503)
	refused := handlers.Permanent(sinkStatus(422))
	limited := handlers.RetryAfter(sinkStatus(429), 20*time.Second)
	long := errors.New(strings.Repeat("x", store.MaxErrorLen+10))
	row := inordertype.State{Halt: &inordertype.Halt{RecordID: "r1", Attempts: 3}}
	it := &item[int]{}
	it.rec.ID = "r1"
	other := &item[int]{}
	other.rec.ID = "r2"
	for _, tc := range []struct {
		name string
		it   *item[int]
		f    fate
		want completion
	}{
		{"retrying, counted on from the row", it, fate{kind: fateRetry, v: judge(transient, "")},
			completion{failure: store.Failure{RecordID: "r1", Error: transient.Error(), Attempts: 4, Status: 503,
				RetryIn: 8 * time.Second}}},
		{"another record's first failure", other, fate{kind: fateRetry, v: judge(transient, "")},
			completion{failure: store.Failure{RecordID: "r2", Error: transient.Error(), Attempts: 1, Status: 503,
				RetryIn: time.Second}}},
		{"the sink asked to wait", other, fate{kind: fateRetry, v: judge(limited, "")},
			completion{failure: store.Failure{RecordID: "r2", Error: limited.Error(), Attempts: 1, Status: 429,
				RetryIn: 20 * time.Second}}},
		{"halted, refused for good", it, fate{kind: fateHalt, v: judge(refused, "")},
			completion{failure: store.Failure{RecordID: "r1", Error: refused.Error(), Attempts: 4, Permanent: true,
				Status: 422, RetryIn: time.Minute, Halt: true}}},
		{"the sink's outage, a refusal of every key", it, fate{kind: fateUnavailable, v: judge(refused, "the sink")},
			completion{failure: store.Failure{RecordID: "r1", Error: refused.Error(), Attempts: 4, Status: 422,
				RetryIn: 8 * time.Second, Unavailable: "the sink"}}},
		{"halted first, then parked", it, fate{kind: fateHalt, v: judge(refused, ""), parkOnceHalted: true},
			completion{failure: store.Failure{RecordID: "r1", Error: refused.Error(), Attempts: 4, Permanent: true,
				Status: 422, RetryIn: time.Minute, Halt: true}, park: true}},
		{"a long error, clipped as stored", other, fate{kind: fateRetry, v: judge(long, "")},
			completion{failure: store.Failure{RecordID: "r2", Error: store.ClipError(long.Error()), Attempts: 1,
				RetryIn: time.Second}}},
	} {
		got := e.complete(row, tc.it, tc.f)
		// The backoff's jitter takes up to a fifth off the wait (see backoff); a wait the sink asked for,
		// or RetryMax for a refusal for good, is whole.
		wait := tc.want.failure.RetryIn
		if tc.f.v.retryAfter == 0 && !got.failure.Permanent {
			require.InDelta(t, wait*9/10, got.failure.RetryIn, float64(wait/10), "%s: the backoff after the attempts", tc.name)
			got.failure.RetryIn = wait
		}
		require.Equal(t, tc.want, got, tc.name)
	}
}
