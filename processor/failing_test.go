package processor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

// stateObserver records what the processor says of a failing record: retrying and halted, as the metrics
// see them.
type stateObserver struct {
	nopObserver
	mu                    sync.Mutex
	retrying, halted      bool
	everRetry, everHalted bool
}

func (o *stateObserver) Halted(_ string, halted bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.halted, o.everHalted = halted, o.everHalted || halted
}

func (o *stateObserver) Retrying(_ string, retrying bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retrying, o.everRetry = retrying, o.everRetry || retrying
}

func (o *stateObserver) now() (retrying, halted, everRetry, everHalted bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.retrying, o.halted, o.everRetry, o.everHalted
}

var _ processor.Observer = (*stateObserver)(nil)

// halt reads the failing record's state from the cursor row, as status and operators see it.
func (b *bundle) halt(t *testing.T) *inordertype.Halt {
	t.Helper()
	procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
	require.NoError(t, err)
	if len(procs) == 0 {
		return nil
	}
	return procs[0].Info.Halt
}

// TestATransientFailureRetriesWithoutHalting: a record that fails twice with an error that may pass is
// retried: the stream shows retrying, never halted, and goes on once the record goes through.
func TestATransientFailureRetriesWithoutHalting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs := &stateObserver{}
	b.cfg.Observer = obs
	b.cfg.RetryMin, b.cfg.RetryMax = 200*time.Millisecond, 200*time.Millisecond
	ids := b.insert(t, 3)
	b.h.setFail(ids[1], errors.New("503 Service Unavailable"))
	start(t, b.cfg)

	waitFor(t, "the stream retrying the second record", func() bool {
		h := b.halt(t)
		return h != nil && h.RecordID == idText(ids[1]) && h.Attempts >= 2
	})
	h := b.halt(t)
	require.True(t, h.Retrying(), "a failure that may pass, for less than HaltAfter, is retrying")
	require.True(t, h.HaltedAt.IsZero())
	retrying, halted, _, _ := obs.now()
	require.True(t, retrying)
	require.False(t, halted)

	b.h.setFail(ids[1], nil)
	waitFor(t, "every record once the sink is back", func() bool { return b.h.count() == 3 })
	require.Equal(t, ids, b.h.ids())
	waitFor(t, "the failure state cleared", func() bool { return b.halt(t) == nil })
	retrying, halted, everRetry, everHalted := obs.now()
	require.True(t, everRetry)
	require.False(t, retrying)
	require.False(t, halted)
	require.False(t, everHalted, "a blip never counts as halted")
}

// TestAPermanentFailureHaltsAtOnce: a refusal halts the stream at its first failure.
func TestAPermanentFailureHaltsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs := &stateObserver{}
	b.cfg.Observer = obs
	ids := b.insert(t, 2)
	b.h.setFail(ids[1], handlers.Permanent(errors.New("400 Bad Request")))
	start(t, b.cfg)

	waitFor(t, "the halt on the second record", func() bool { h := b.halt(t); return h != nil })
	h := b.halt(t)
	require.Equal(t, idText(ids[1]), h.RecordID)
	require.False(t, h.Retrying(), "a permanent refusal halts at once")
	// Halted at its first failure, not after retrying: the halt's time is that of the first failure (the
	// record is tried again every RetryMax, 100ms here, so by this read it may have failed twice; the
	// test read the attempts at 1 before and failed one run in many when a retry came first).
	require.Less(t, h.HaltedAt.Sub(h.FirstFailureAt), b.cfg.RetryMax/2, "halted at the first failure")
	require.GreaterOrEqual(t, h.Attempts, 1)
	waitFor(t, "the observer told", func() bool { _, halted, _, _ := obs.now(); return halted })
	_, _, everRetry, _ := obs.now()
	require.False(t, everRetry)
}

// TestAFailureLongerThanHaltAfterHalts: a record that keeps failing with errors that may pass is retrying
// until it has failed for HaltAfter, then halted; it goes on once it goes through.
func TestAFailureLongerThanHaltAfterHalts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs := &stateObserver{}
	b.cfg.Observer = obs
	b.cfg.HaltAfter = 300 * time.Millisecond
	ids := b.insert(t, 2)
	b.h.setFail(ids[1], errors.New("timeout"))
	start(t, b.cfg)

	waitFor(t, "the stream retrying", func() bool { h := b.halt(t); return h != nil && h.Retrying() })
	waitFor(t, "the stream halted after HaltAfter", func() bool { h := b.halt(t); return h != nil && !h.Retrying() })
	h := b.halt(t)
	require.GreaterOrEqual(t, h.HaltedAt.Sub(h.FirstFailureAt), b.cfg.HaltAfter)
	waitFor(t, "the observer told", func() bool { r, halted, _, _ := obs.now(); return halted && !r })

	b.h.setFail(ids[1], nil)
	waitFor(t, "every record", func() bool { return b.h.count() == 2 })
	waitFor(t, "the halt cleared", func() bool { _, halted, _, _ := obs.now(); return !halted && b.halt(t) == nil })
}

// TestTheNextAttemptIsWaitedForOnTheDatabasesClock: the wait before a failing record's next attempt is
// measured on the clock that stamped it, the database's, whatever this machine's says. With the database's
// clock an hour ahead of this machine's (as the processor's connections read it: clock_timestamp() found
// first in a schema of the test's own), a record that failed is tried again after its backoff, not an hour
// later.
func TestTheNextAttemptIsWaitedForOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE SCHEMA skew;
		CREATE FUNCTION skew.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS
		$$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$`)
	b.cfg.ClientConfig.ConnConfig.RuntimeParams["search_path"] = "skew, pg_catalog, public"
	b.cfg.RetryMin, b.cfg.RetryMax = 200*time.Millisecond, 200*time.Millisecond
	ids := b.insert(t, 2)
	b.h.setFail(ids[0], errors.New("503 Service Unavailable"))
	start(t, b.cfg)

	waitFor(t, "the first record failing", func() bool { h := b.halt(t); return h != nil && h.Attempts >= 1 })
	h := b.halt(t)
	require.InDelta(t, time.Hour.Seconds(), time.Until(h.LastFailureAt).Seconds(), 60,
		"the cursor row is stamped by the database's clock, an hour ahead")
	b.h.setFail(ids[0], nil)
	waitFor(t, "both records, the failing one tried again after its backoff", func() bool { return b.h.count() == 2 })
	require.Equal(t, ids, b.h.ids())
}
