package processor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// A row that commits behind the position after the processor passed it is never delivered: no horizon
// can bring it back. With the insert clock that should not happen (short of the database's clock stepping
// back further than the insert latency); with the writers or transactions opt-in it does whenever the
// application writes a created_at earlier than rows already read. Either way it must not pass in silence.
// So a processor remembers the stretches of the table's order it delivered (spans), and lateAfter later
// counts the rows each holds now: a span that holds more than was delivered in it has late rows. They are
// counted in the cursor row (status shows them, the metrics count them) and logged with where they lie
// and the rewind that delivers them.
//
// The count reads the rows again, so it is bounded: lateBudget rows a second at most. A stream delivering
// faster has its spans sampled, the ones it cannot count dropped unchecked.

// lateAfter is how long after its delivery a span is counted: a row committing later than that, behind a
// span already counted, is not seen.
const lateAfter = 30 * time.Second

// lateAfterForTests, when not zero, is lateAfter for the processors made while it is set (nanoseconds):
// a test that cannot wait lateAfter sets it (SetLateAfter in export_test.go).
var lateAfterForTests atomic.Int64

const (
	// lateBudget is how many delivered rows the counts read a second, at most.
	lateBudget = 20_000
	// lateKept is how many spans are kept waiting for their count; beyond it the oldest are dropped.
	lateKept = 64
	// lateEvery is how often the due spans are counted.
	lateEvery = time.Second
)

// lateSpan is a span this instance delivered n records of, at the instant at (its last delivery).
type lateSpan struct {
	source.Span
	n  int64
	at time.Time
}

// lateWatch remembers the spans delivered and not yet counted, oldest first. It belongs to one processor
// and is used by its goroutine only.
type lateWatch struct {
	// after is lateAfter, as the processor was made with it (zero: lateAfter).
	after     time.Duration
	spans     []lateSpan
	nextCount time.Time
	// dropped counts the delivered rows whose spans were dropped unchecked, over the budget.
	dropped int64
}

// add remembers that n records were delivered from from to to. A span that goes on from the last one
// within a second joins it while the two stay within the budget.
func (w *lateWatch) add(from, to inordertype.Position, n int, at time.Time) {
	if n <= 0 {
		return
	}
	if k := len(w.spans); k > 0 {
		last := &w.spans[k-1]
		if samePosition(last.To, from) && at.Sub(last.at) < lateEvery && last.n+int64(n) <= lateBudget {
			last.To, last.n, last.at = to, last.n+int64(n), at
			return
		}
	}
	w.spans = append(w.spans, lateSpan{Span: source.Span{From: from, To: to}, n: int64(n), at: at})
	for len(w.spans) > lateKept {
		w.dropped += w.spans[0].n
		w.spans = w.spans[1:]
	}
}

func samePosition(a, b inordertype.Position) bool {
	return a.ID == b.ID && a.CreatedAt.Equal(b.CreatedAt)
}

// due takes the spans delivered w.after or longer before now, within the budget of one count.
func (w *lateWatch) due(now time.Time) []lateSpan {
	if w.after == 0 {
		w.after = lateAfter
	}
	var out []lateSpan
	var rows int64
	for len(w.spans) > 0 && now.Sub(w.spans[0].at) >= w.after && rows+w.spans[0].n <= lateBudget {
		rows += w.spans[0].n
		out = append(out, w.spans[0])
		w.spans = w.spans[1:]
	}
	if len(out) == 0 && len(w.spans) > 0 && now.Sub(w.spans[0].at) >= w.after {
		// One span alone over the budget (a batch of more records than it): counted all the same.
		out, w.spans = w.spans[:1:1], w.spans[1:]
	}
	return out
}

// newLateWatch is the watch of a processor made now.
func newLateWatch() lateWatch {
	after := lateAfter
	if d := time.Duration(lateAfterForTests.Load()); d > 0 {
		after = d
	}
	return lateWatch{after: after}
}

// forget drops the spans: the position was moved back on purpose, and what lies after it is delivered
// again.
func (w *lateWatch) forget() { w.spans = nil }

// idleBatch is how long a quiet owner whose probe watches its rows waits for the next batch of its own,
// under poll interval poll and lease lease: the probe's answer, an operator's action seen in the cursor
// row or a notification ends the wait sooner, and the probe renews the lease meanwhile (see
// store.Renewal). Such a batch is no longer needed to see anything; it comes a lease after the last
// (idleTicks poll intervals at least), or when the oldest stretch delivered is due for its count of late
// rows, to keep the session and the holds up to date at a cost that does not grow much with the
// processes: a thousand quiet processes with the default lease make about 33 such batches a second.
func (w *lateWatch) idleBatch(poll, lease time.Duration) time.Duration {
	wait := max(idleTicks*poll, lease)
	if len(w.spans) > 0 {
		after := w.after
		if after == 0 {
			after = lateAfter
		}
		wait = min(wait, max(time.Until(w.spans[0].at.Add(after)), poll))
	}
	return wait
}

// countLate counts the spans due, at most once a second, in the batch's transaction, and counts and
// reports the rows found in them beyond what was delivered.
func (hz *horizonWatch) countLate(work context.Context, t *source.Table) error {
	now := time.Now()
	if now.Before(hz.late.nextCount) {
		return nil
	}
	hz.late.nextCount = now.Add(lateEvery)
	due := hz.late.due(now)
	if len(due) == 0 {
		return nil
	}
	spans := make([]source.Span, len(due))
	for i, s := range due {
		spans[i] = s.Span
	}
	ctx, cancel := hz.cur.Session.Bounded(work)
	defer cancel()
	counts, err := t.CountSpans(ctx, hz.cur.Lock.Tx(), spans)
	if err != nil {
		return err
	}
	var late int64
	for i, c := range counts {
		extra := c - due[i].n
		if extra <= 0 {
			continue // as delivered, or fewer: rows deleted since (a prune)
		}
		late += extra
		from := due[i].From
		hz.log.Error().Str("table", t.Qualified).Int64("rows", extra).Str("from", from.String()).
			Str("to", due[i].To.String()).Str("tracking", string(hz.kind)).
			Msgf("%d rows committed behind the position after it had passed them, and were not delivered: "+
				"deliver them (and what follows again) with: inorder rewind --process %s --to-time %s",
				extra, hz.process, from.CreatedAt.Format(time.RFC3339Nano))
	}
	if late == 0 {
		return nil
	}
	return hz.cur.Source.AddLate(work, late)
}
