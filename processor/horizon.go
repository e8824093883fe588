package processor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// The horizon: see internal/source, where the transactions in flight are read. The tracker below folds
// the polls into the history of each transaction and computes the horizon from it.

// txn is what the tracker knows of one transaction in flight.
type txn struct {
	pid       int // 0 once prepared
	firstSeen time.Time
	// lastAbsent is the last poll at which the transaction was not in flight; zero: present since
	// tracking began, when nothing is known of its start.
	lastAbsent time.Time
	// lastNotWriter is the last poll at which it had not written to the source; zero: unknown.
	lastNotWriter time.Time
	writer        bool
}

// holder names the transaction whose being open limits the horizon.
type holder struct {
	// PID is its backend process id (look it up in pg_stat_activity); 0 for a prepared transaction (see
	// pg_prepared_xacts).
	PID int
	// Since is when the tracker first saw it.
	Since time.Time
	// Writer reports whether it has written to the source.
	Writer bool
}

// horizon is the result of one poll.
type horizon struct {
	now time.Time
	// at is the time below which every row is visible; zero when a transaction of unknown start blocks all.
	at time.Time
	// hold is the transaction that limits at, if any.
	hold *holder
}

// tracker keeps the history of the transactions in flight across polls. It tracks both the writers and
// every transaction whatever the horizon in use, so that a switch to HorizonTransactions knows since when
// each transaction has been open. It belongs to one processor and is used by one goroutine.
//
// # Keyed by virtual transaction id, which a server hands out again
//
// seen is keyed by pg_locks.virtualtransaction: a backend slot and that slot's counter. The counter
// carries over from one session of a slot to the next, so while a server runs an id is not handed out
// twice, on any version; from PostgreSQL 17 the slots are handed out in turn (96/2, then 97/2, ...) where
// 16 and older reuse the lowest free one. But the counters start again when the server does, and a
// processor behind a transaction pooler keeps its client connection, and this tracker, across a restart
// of the server behind it (a processor that sees its connection drop starts a new tracker). A transaction
// of the restarted server (B) may then carry the id of one seen before the restart (A), and when no poll
// fell between A's end and B's start the tracker takes B for A. That can only hold the horizon longer,
// never let it pass a row:
//   - An entry of seen was present at the last poll (one absent at a poll is deleted at it), so A was; B
//     began after A ended, so after that poll. The entry's lastAbsent is that poll or earlier: B holds the
//     horizon at an instant no later than its start, and every row B inserts is dated after its start.
//   - For the writers horizon the entry keeps A's lastNotWriter, earlier than B's start too; if A was a
//     writer and B is not, B is still held as a writer: longer, not shorter.
//   - The entry goes only at a poll that sees the id absent, when neither A nor B is in flight.
//
// What it gets wrong is what a hold says of B: since when (A's first sighting) and, unless B writes to the
// source, A's pid. TestAReusedVirtualTransactionIDNeverSkipsARow makes such a reuse happen, on every
// version, and checks that no row is skipped.
type tracker struct {
	guard     time.Duration
	firstPoll time.Time
	lastPoll  time.Time
	seen      map[string]*txn
	// ended are the transactions the last poll found gone: see earliestStart.
	ended []*txn
}

func newTracker(guard time.Duration) *tracker {
	return &tracker{guard: guard, seen: map[string]*txn{}}
}

// observe folds one poll into the history and returns the horizon of the given kind.
func (tr *tracker) observe(o source.Observation, kind inordertype.Horizon) horizon {
	tr.ended = tr.ended[:0]
	for vxid, e := range tr.seen {
		_, w := o.Writers[vxid]
		_, x := o.Txs[vxid]
		if !w && !x {
			delete(tr.seen, vxid) // it ended: its rows, if committed, are visible to the next statement
			tr.ended = append(tr.ended, e)
		}
	}
	note := func(vxid string, pid int, writer bool) {
		e, ok := tr.seen[vxid]
		if !ok {
			e = &txn{pid: pid, firstSeen: o.Now, lastAbsent: tr.lastPoll}
			if writer && pid == 0 {
				// Prepared when first seen: it keeps its id across PREPARE, so it was prepared before
				// tracking began, or came back under a new id with a restarted server. Its start is unknown.
				e.lastAbsent = time.Time{}
			}
			tr.seen[vxid] = e
		}
		if writer && !e.writer {
			// It was not a writer at the last poll (or was not there at all).
			e.lastNotWriter, e.writer = tr.lastPoll, true
			if e.lastAbsent.IsZero() {
				e.lastNotWriter = time.Time{}
			}
		}
		if !ok || writer {
			e.pid = pid // a prepared transaction shows no pid
		}
	}
	for vxid, pid := range o.Writers {
		note(vxid, pid, true)
	}
	for vxid, pid := range o.Txs {
		if _, w := o.Writers[vxid]; !w {
			note(vxid, pid, false)
		}
	}

	h := horizon{now: o.Now, at: o.Now.Add(-tr.guard)}
	var limit *txn
	var limitFrom time.Time
	for _, e := range tr.seen {
		from := e.lastAbsent
		if kind != inordertype.HorizonTransactions { // the writers, whose rows the clock or created_at dates at insert
			if !e.writer {
				continue
			}
			from = e.lastNotWriter
		}
		if limit == nil || holdsLonger(e, from, limit, limitFrom) {
			limit, limitFrom = e, from
		}
	}
	if limit != nil {
		if limitFrom.IsZero() {
			h.at = time.Time{}
		} else if at := limitFrom.Add(-tr.guard); at.Before(h.at) {
			h.at = at
		} else {
			limit = nil // began after now less the guard: it limits nothing
		}
	}
	if limit != nil {
		h.hold = &holder{PID: limit.pid, Since: limit.firstSeen, Writer: limit.writer}
	}
	if tr.firstPoll.IsZero() {
		tr.firstPoll = o.Now
	}
	tr.lastPoll = o.Now
	return h
}

// holdsLonger reports whether a, known absent last at aFrom (zero: unknown), limits the horizon more than
// b: an unknown start first, then the earlier instant. Ties go to the one seen first, then the lower pid,
// so that the hold named in status does not flap between equals from poll to poll.
func holdsLonger(a *txn, aFrom time.Time, b *txn, bFrom time.Time) bool {
	switch {
	case aFrom.IsZero() != bFrom.IsZero():
		return aFrom.IsZero()
	case !aFrom.Equal(bFrom):
		return aFrom.Before(bFrom)
	case !a.firstSeen.Equal(b.firstSeen):
		return a.firstSeen.Before(b.firstSeen)
	}
	return a.pid < b.pid
}

// earliestStart bounds the start of the transactions in flight at the last poll: the earliest instant at
// which one of them was known to be absent, less the guard. The pids of those present since tracking
// began, whose start is unknown, are returned apart (the bound then is the first poll).
//
// The transactions the last poll found gone count too. A poll reads the column's default with the
// snapshot its statement began with, and pg_locks later, while it runs: a default changed (and a
// transaction that was open across the change committed) between the two makes that poll pair the old
// default with the transaction's absence. The change then shows at the next poll only, by which time the
// transaction is no longer in flight; it may have written rows dated at its start with the new default.
func (tr *tracker) earliestStart() (at time.Time, unknown []int) {
	for _, e := range append(slices.Collect(maps.Values(tr.seen)), tr.ended...) {
		from := e.lastAbsent
		if from.IsZero() {
			unknown = append(unknown, e.pid)
			from = tr.firstPoll
		}
		if from = from.Add(-tr.guard); at.IsZero() || from.Before(at) {
			at = from
		}
	}
	sort.Ints(unknown)
	return at, unknown
}

// clockStopped says, at once and then every HoldWarnAfter, that the insert clock's trigger is gone or
// disabled, and so the stream waits: an insert may now write the clock's column itself, with any time.
func (p *Processor[T]) clockStopped(o source.Observation) {
	if !p.clockOff.IsZero() && time.Since(p.clockWarned) < p.cfg.HoldWarnAfter {
		return
	}
	if p.clockOff.IsZero() {
		p.clockOff = o.Now
	}
	p.clockWarned = time.Now()
	what, fix := "dropped", source.AddClockCommand(p.rd.table.Qualified)
	if o.Clock.There {
		what = "disabled"
		fix = fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER %s", p.rd.table.Ident, source.ClockTrigger)
	}
	p.log.Error().Str("table", p.rd.table.Qualified).Time("since", p.clockOff).
		Msgf("the insert clock's trigger on %s was %s, so an insert may date its row earlier than the position: "+
			"the stream waits until it stamps inserts again: %s", p.rd.table.Qualified, what, fix)
}

// holdReportAfter is how long a transaction must have held the horizon before it is reported: shorter
// holds are the ordinary life of transactions.
const holdReportAfter = time.Second

func (p *Processor[T]) noteHold(work context.Context, h horizon) error {
	var hold holder
	if h.hold != nil && h.now.Sub(h.hold.Since) >= holdReportAfter {
		hold = *h.hold
	}
	if h.hold != nil {
		p.obs.Hold(p.cfg.Process, h.now.Sub(h.hold.Since))
	} else {
		p.obs.Hold(p.cfg.Process, 0)
	}
	if hold != p.hold {
		if err := p.cur.SetHold(work, hold.PID, hold.Since); err != nil {
			return err
		}
		if !hold.Since.IsZero() {
			p.log.Info().Int("pid", hold.PID).Time("since", hold.Since).Str("horizon", string(p.kind)).
				Msg(holderName(hold) + " holds the horizon; records after its start wait until it ends")
		} else {
			p.log.Info().Msg("horizon no longer held")
		}
		p.hold, p.holdWarned = hold, time.Time{}
	}
	if !hold.Since.IsZero() {
		age := h.now.Sub(hold.Since)
		if age >= p.cfg.HoldWarnAfter && time.Since(p.holdWarned) >= p.cfg.HoldWarnAfter {
			p.holdWarned = time.Now()
			p.log.Warn().Int("pid", hold.PID).Time("since", hold.Since).Str("held_for", age.Round(time.Millisecond).String()).
				Str("horizon", string(p.kind)).Msg(p.holdAdvice(hold))
		}
	}
	return nil
}

func holderName(h holder) string {
	switch {
	case h.PID == 0:
		return "a prepared transaction"
	case h.Writer:
		return "an open writer transaction"
	default:
		return "an open transaction"
	}
}

// holdAdvice says what to do about a long hold.
func (p *Processor[T]) holdAdvice(h holder) string {
	var b strings.Builder
	b.WriteString(holderName(h) + " has held the stream for long; ")
	if h.PID == 0 {
		b.WriteString("finish it with COMMIT PREPARED or ROLLBACK PREPARED (see pg_prepared_xacts)")
	} else {
		fmt.Fprintf(&b, "if it is idle in transaction (SELECT state, query FROM pg_stat_activity WHERE pid = %d), "+
			"end it, or set idle_in_transaction_session_timeout", h.PID)
	}
	if p.kind == inordertype.HorizonTransactions {
		fmt.Fprintf(&b, "; with created_at set to the transaction's start every open transaction in the database "+
			"holds this stream, not only the table's writers; the insert clock waits only for them: %s",
			source.AddClockCommand(p.rd.table.Qualified))
	}
	return b.String()
}

// horizon polls the transactions in flight and returns the horizon. When the created_at default has
// changed so that the writers horizon no longer fits, it switches to the transactions horizon for good and
// moves the position back to the earliest start of the transactions that were open across the change:
// they may write rows dated before the position. That redelivers what lies between; it skips nothing.
func (p *Processor[T]) horizon(work context.Context) (horizon, error) {
	o := p.polled
	if !p.cur.TakeRide() {
		// No poll came with the lock held (it was taken before the poll's table was known): poll now.
		ctx, cancel := p.bounded(work)
		var err error
		o, err = p.rd.table.PollLocks(ctx, p.cur.Tx())
		cancel()
		if err != nil {
			return horizon{}, err
		}
	}
	if wait, err := p.followShape(work, o.Shape); err != nil || wait {
		return horizon{now: o.Now}, err // no read while the source does not fit (see shape.go)
	}
	if p.kind == inordertype.HorizonWriters && !p.rd.table.WritersSafe(o.Default) {
		at, unknown := p.tracker.earliestStart()
		pos := p.cur.State().Position
		ev := p.log.Warn().Str("table", p.rd.table.Qualified).Str("default", o.Default).Str("horizon", string(inordertype.HorizonTransactions))
		if !at.IsZero() && at.Before(pos.CreatedAt) {
			// The move back is made durable at once: a batch that fails later must not take it back while
			// the switch stays.
			back := inordertype.Position{CreatedAt: at.UTC()}
			p.tenure.delivered.forget() // delivered again on purpose
			p.exec.attempts.forgetAccepted()
			p.late.forget()
			if _, err := p.cur.Checkpoint(work, back, 0, store.InFlight{}); err != nil {
				return horizon{}, err
			}
			ev = ev.Str("from", pos.String()).Str("to", back.String())
		}
		p.kind = inordertype.HorizonTransactions
		p.tenure.sourceSaved = false // the cursor row says the tracking it reads by now, at the next batch
		ev.Msg("the created_at default changed while running: waiting for every open transaction from now on, and " +
			"delivering again from the earliest start of the transactions open across the change")
		if len(unknown) > 0 {
			p.log.Error().Ints("pids", unknown).Time("watched_since", p.tracker.firstPoll).
				Msg("transactions open since before this instance began watching may write rows dated earlier than " +
					"it can see; once they end, if they wrote to the source, rewind to before their start")
		}
		if !p.cur.Locked() { // an operator took the row in the instant after the commit: look again later
			return horizon{now: o.Now}, nil
		}
	}
	p.tracker.guard = p.margin()
	h := p.tracker.observe(o, p.kind)
	if p.kind == inordertype.HorizonClock && !o.Clock.Stamps() {
		p.clockStopped(o)
		h.at = time.Time{} // an insert may write the clock itself now: nothing is read until it stamps again
	} else if !p.clockOff.IsZero() {
		p.log.Info().Str("table", p.rd.table.Qualified).Msg("the insert clock stamps inserts again; reading on")
		p.clockOff = time.Time{}
	}
	if p.cfg.TxHandler != nil && p.kind == inordertype.HorizonTransactions {
		// A transactional handler may insert into the source itself, in the cursor transaction, whose rows
		// then carry its start: read only below it.
		if capAt := o.TxStart.Add(-p.cfg.InsertLatency); !h.at.IsZero() && capAt.Before(h.at) {
			h.at = capAt
		}
	}
	return h, nil
}

// margin is the safety margin below the horizon for what this processor reads by now: Config.InsertLatency,
// or on a table read by the insert clock, when InsertLatency was not set, clockInsertLatency. The clock
// stamps a row in a BEFORE INSERT trigger, after its transaction took the lock on the table that the poll
// of pg_locks sees, and the poll is stamped before it reads the locks: a transaction it did not see stamps
// its rows later than the poll by the database's one clock, margin or not. What is left to cover is that
// clock stepping back between the two (see docs/horizon.md).
func (p *Processor[T]) margin() time.Duration {
	if p.kind == inordertype.HorizonClock {
		return p.clockMargin
	}
	return p.cfg.InsertLatency
}
