package processor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
)

func TestDecideFate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	const haltAfter = 5 * time.Minute
	transient := errors.New("503 from the sink")
	refused := handlers.Permanent(errors.New("422 from the sink"))
	// failing is the cursor row's halt state of record "r1", failing since the given time before now.
	failing := func(since time.Duration, halted bool) *inordertype.Halt {
		h := &inordertype.Halt{RecordID: "r1", Attempts: 3, FirstFailureAt: now.Add(-since)}
		if halted {
			h.HaltedAt = now.Add(-time.Second)
		}
		return h
	}
	outage := &inordertype.Halt{RecordID: "r1", Attempts: 2, FirstFailureAt: now.Add(-time.Hour), Unavailable: "the sink"}
	other := &inordertype.Halt{RecordID: "r0", Attempts: 9, FirstFailureAt: now.Add(-time.Hour), HaltedAt: now.Add(-time.Minute)}

	for _, tc := range []struct {
		name string
		in   fateInput
		want fateKind
	}{
		{"went through", fateInput{}, fateDelivered},
		{"went through after failing", fateInput{halt: failing(time.Hour, true)}, fateDelivered},
		{"behind a parked key, not sent", fateInput{behind: true}, fateParkedBehind},
		{"behind a key parked while it was in flight, whatever the sink said",
			fateInput{behind: true, err: refused, parking: true, key: "k"}, fateParkedBehind},
		{"the cursor transaction failed", fateInput{err: batchError{errors.New("release savepoint")}, parking: true, key: "k"}, fateAbort},
		{"cut off by the shutdown timeout", fateInput{err: refused, cutOff: true, parking: true, key: "k"}, fateCutOff},
		{"went through as the shutdown timeout ran out", fateInput{cutOff: true}, fateDelivered},
		{"the cursor transaction failed as the shutdown timeout ran out", fateInput{err: batchError{errors.New("release savepoint")}, cutOff: true}, fateAbort},
		// A TxBatchHandler's batch and a redrive pass the error alone: every failing fate but cut off is alike to them.
		{"the error alone, transient", fateInput{err: transient}, fateRetry},
		{"the error alone, refused", fateInput{err: refused}, fateHalt},
		{"the error alone, cut off", fateInput{err: transient, cutOff: true}, fateCutOff},
		{"the sink's outage is no key's", fateInput{err: refused, sinkCheck: "the sink", parking: true, key: "k"}, fateUnavailable},
		{"the sink's outage, failing for long", fateInput{err: transient, sinkCheck: "the sink", halt: failing(time.Hour, false)}, fateUnavailable},
		{"a first failure", fateInput{err: transient}, fateRetry},
		{"a first failure, parking", fateInput{err: transient, parking: true, key: "k"}, fateRetry},
		{"failing for less than halt-after", fateInput{err: transient, halt: failing(time.Minute, false), parking: true, key: "k"}, fateRetry},
		{"failing for longer than halt-after", fateInput{err: transient, halt: failing(time.Hour, false)}, fateHalt},
		{"failing for longer than halt-after, parking", fateInput{err: transient, halt: failing(time.Hour, false), parking: true, key: "k"}, fatePark},
		{"failing for longer than halt-after, parking, keyless", fateInput{err: transient, halt: failing(time.Hour, false), parking: true}, fateHalt},
		{"halted already", fateInput{err: transient, halt: failing(time.Minute, true)}, fateHalt},
		{"halted already, parking", fateInput{err: transient, halt: failing(time.Minute, true), parking: true, key: "k"}, fatePark},
		{"refused", fateInput{err: refused}, fateHalt},
		{"refused, parking", fateInput{err: refused, parking: true, key: "k"}, fatePark},
		{"refused, parking, keyless", fateInput{err: refused, parking: true}, fateHalt},
		{"another record's halt counts nothing for this one", fateInput{err: transient, halt: other, parking: true, key: "k"}, fateRetry},
		{"refused while another record halts", fateInput{err: refused, halt: other, parking: true, key: "k"}, fatePark},
		{"refused after failing in the sink's outage: halted first, then parked",
			fateInput{err: refused, halt: outage, parking: true, key: "k"}, fateHalt},
		{"refused after failing in the sink's outage, keyless: halted", fateInput{err: refused, halt: outage, parking: true}, fateHalt},
		{"the sink's outage again", fateInput{err: refused, sinkCheck: "the sink", halt: outage, parking: true, key: "k"}, fateUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.id, in.haltAfter, in.now = "r1", haltAfter, now
			got := decideFate(in)
			require.Equal(t, tc.want, got.kind, "got %s, want %s", got.kind, tc.want)
			switch tc.want {
			case fateDelivered, fateParkedBehind:
				require.Equal(t, verdict{}, got.v)
			default:
				require.Equal(t, judge(tc.in.err, tc.in.sinkCheck), got.v, "the verdict travels with the fate")
			}
			require.Equal(t, tc.in.halt == outage && tc.want == fateHalt && tc.in.key != "", got.parkOnceHalted,
				"only a refusal after the sink's outage halts first and then parks")
			stops := tc.want == fateRetry || tc.want == fateHalt || tc.want == fateUnavailable || tc.want == fateCutOff
			require.Equal(t, stops, got.fails(), "whether the batch stops on the record")
		})
	}
}

func TestFateAtBatchEnd(t *testing.T) {
	t.Parallel()
	cause := errors.New("503 from the sink")
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, k := range []fateKind{fateRetry, fateHalt, fateUnavailable, fateCutOff} {
		f := fate{kind: k, v: judge(cause, "")}
		require.Equal(t, f, f.atBatchEnd(live, live), "%s: the batch was not cut off", k)
		require.Equal(t, f, f.atBatchEnd(done, live), "%s: stopping, within the shutdown timeout", k)
		require.Equal(t, fate{kind: fateCutOff, v: judge(cause, "")}, f.atBatchEnd(done, done), "%s: cut off since", k)
	}
}

// TestJudge: the verdict on a failure holds everything decided about it, once: what the sink answered,
// whether it refused the record for good, the delay it asked for, and what to check when the failure is
// the sink's own.
func TestJudge(t *testing.T) {
	t.Parallel()
	refused := handlers.Permanent(sinkStatus(422))
	limited := handlers.RetryAfter(sinkStatus(429), 2*time.Second)
	for _, tc := range []struct {
		name  string
		err   error
		check string
		want  verdict
	}{
		{"went through", nil, "", verdict{}},
		{"refused for good", refused, "", verdict{err: refused, permanent: true, status: 422}},
		{"asked to wait", limited, "", verdict{err: limited, status: 429, retryAfter: 2 * time.Second}},
		{"the sink's outage", refused, "the sink", verdict{err: refused, permanent: true, status: 422, unavailable: "the sink"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, judge(tc.err, tc.check))
		})
	}
}

// sinkStatus is a sink's answer with its status, as handlers/webhook's StatusError is.
type sinkStatus int

func (s sinkStatus) Error() string   { return fmt.Sprintf("%d from the sink", int(s)) }
func (s sinkStatus) SinkStatus() int { return int(s) }
