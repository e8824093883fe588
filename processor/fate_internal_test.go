package processor

import (
	"context"
	"errors"
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
		{"refused after failing in the sink's outage: halted first, parked once counted",
			fateInput{err: refused, halt: outage, parking: true, key: "k"}, fateHalt},
		{"counted: the row says not halted, whatever this clock says",
			fateInput{err: transient, halt: failing(time.Hour, false), counted: true, parking: true, key: "k"}, fateRetry},
		{"counted: the row says halted", fateInput{err: transient, halt: failing(time.Minute, true), counted: true, parking: true, key: "k"}, fatePark},
		{"counted: the row says halted, not parking", fateInput{err: transient, halt: failing(time.Minute, true), counted: true}, fateHalt},
		{"counted: the sink's outage", fateInput{err: refused, sinkCheck: "the sink", halt: outage, counted: true, parking: true, key: "k"}, fateUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.id, in.haltAfter, in.now = "r1", haltAfter, now
			got := decideFate(in)
			require.Equal(t, tc.want, got.kind, "got %s, want %s", got.kind, tc.want)
			switch tc.want {
			case fateDelivered, fateParkedBehind:
				require.NoError(t, got.cause)
			default:
				require.Equal(t, tc.in.err, got.cause)
			}
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
		f := fate{kind: k, cause: cause}
		require.Equal(t, f, f.atBatchEnd(live, live), "%s: the batch was not cut off", k)
		require.Equal(t, f, f.atBatchEnd(done, live), "%s: stopping, within the shutdown timeout", k)
		require.Equal(t, fate{kind: fateCutOff, cause: cause}, f.atBatchEnd(done, done), "%s: cut off since", k)
	}
}
