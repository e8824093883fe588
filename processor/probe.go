package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// The probe: when there was nothing to read, instead of sleeping a whole poll interval the processor asks,
// at short intervals, whether any row lies after its position at all, and whether its cursor row changed
// (an operator's skip, rewind, pause or resume). Every processor of one database in this Go process asks
// through one shared connection, all in one statement (internal/store's Prober), outside any transaction,
// without reading pg_locks. Only a yes runs a batch (the lock, the horizon, the read), and otherwise a
// batch runs every idleTicks poll intervals, to keep the session alive and look at the horizon's holds.
// A probe only decides when to look, never what is read: the horizon still decides that, so a row the
// horizon holds is not read however often the probe sees it.
//
// The interval starts at probeFirst after records were handled and doubles up to the probe interval
// (Config.ProbeInterval); after a stream has had nothing for probeQuietAfter it grows to four times that,
// so that many quiet processes cost little. While a transaction that has been open for a while holds the
// horizon, the probe would see rows the horizon holds and answer yes again and again: the processor then
// watches only its cursor row, and runs a batch every poll interval as without a probe. A halted or paused
// stream also watches only its cursor row, so an operator's action takes effect at once.
const (
	probeFirst      = 2 * time.Millisecond
	probeQuietAfter = 10 * time.Second
	idleTicks       = 10
	// shapeProbeEvery is how often at most the probe asks, for one waiter, whether its source's columns
	// changed (see probeCond).
	shapeProbeEvery = time.Second
)

// probesRows reports whether an idle wait probes for rows after the position: not while a transaction
// open for a while holds the horizon (the probe would answer yes for rows no batch may read yet).
func (w *waiter) probesRows(owner, heldLong bool) bool {
	return w.prober != nil && owner && !heldLong
}

// rowWatched bounds a wait that an operator's action should end (a backoff, a pause): the probe watches
// the cursor row through it, and without the probe the processor looks at the row again every poll
// interval, so a skip, rewind, pause or resume takes effect then, not when the wait ends.
func (w *waiter) rowWatched(d time.Duration) time.Duration {
	if w.prober == nil {
		return min(d, w.pollInterval)
	}
	return d
}

// probeCond returns the probe's question for this processor, asked about pos, the position the last batch
// left: is there a row after it that a batch could read now (of iw's table, below now less its margin, or
// its columns changed from the fingerprint known)? The question is built by the probe's own goroutine,
// possibly while this processor runs its next batch, so it holds a copy of what it needs and reads nothing
// of the processor's.
func probeCond(pos inordertype.Position, iw idleWatch) func() store.RowsQuestion {
	t, margin, known := iw.table, iw.margin, iw.known
	// The fingerprint is asked at most once every shapeProbeEvery for a waiter: it costs the server a
	// look at the catalog each time, which a thousand waiters at every probe would make a load of its own.
	var shapeAsked time.Time
	return func() store.RowsQuestion {
		asked := ""
		if known != "" && time.Since(shapeAsked) >= shapeProbeEvery {
			shapeAsked, asked = time.Now(), known
		}
		return t.ProbeQuestion(pos, margin, asked)
	}
}

// probeWait waits up to d for the shared probe to see a row after the position (when rows is set) or a
// change to the cursor row. It reports whether either happened or wake received, and false when the probe
// failed: the wait then ends at once, and the caller waits its poll interval as without a probe.
func (w *waiter) probeWait(ctx context.Context, d time.Duration, rows bool, wake <-chan struct{}, iw idleWatch) (found, ok bool) {
	limit := w.probeInterval
	if time.Since(w.lastRecords) >= probeQuietAfter {
		limit *= 4
	}
	req := store.ProbeRequest{Cursor: w.cur.Name(), Version: w.cur.Position.Version(), Gap: limit, MaxGap: limit}
	token := w.cur.Lease.Tenure()
	if iw.owner {
		req.Renew, req.Lost = w.cur.Lease.ProbeRenewal(), w.cur.Lease.SessionLost()
	}
	if rows {
		req.RowsFunc = probeCond(w.cur.Position.State().Position, iw)
		req.Gap = min(max(w.probeGap, probeFirst), limit)
	}
	r := w.prober.Wait(ctx, req, d, wake)
	w.cur.Lock.Renewed(r.Renewed, token)
	if r.Err != nil {
		if store.Unanswered(ctx, r.Err) {
			// The probe borrows a connection of the Client's pool, the one the batches take turns on: a dead
			// one is found by whichever asks first, and said so either way.
			w.log.Warn().Err(r.Err).Msg("the database did not answer in time: the connection counts as dead; reconnecting")
		} else {
			w.log.Debug().Err(r.Err).Msg("probe failed; waiting for the next batch")
		}
		return false, false
	}
	if rows {
		w.probeGap = r.Gap
	}
	switch {
	case r.Rows:
		w.woke = r.Answered
	case r.Woken:
		w.woke = w.notifiedAt() // or the session lost, whose batch needs no row seen
	}
	return r.Rows || r.Changed || r.Woken, true
}

// sharedProbe is the idle probe a processor shares with the other processors of its store (see
// store.Store.Prober).
type sharedProbe = store.Prober
