package processor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

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

// horizonWatch watches the transactions in flight on the source for one processor: it owns the tracker
// and the horizon in use, the hold last said, the watch for rows that commit behind the position (late),
// and whether the insert clock stamps. The poll it folds in rides with the lock of the cursor row (see
// rideLocks). It is used by the processor's goroutine only.
type horizonWatch struct {
	tracker *tracker
	kind    inordertype.Horizon // the horizon in use: the table's, until a changed default makes it HorizonTransactions
	// late watches the spans delivered for rows that commit behind the position (late.go).
	late lateWatch
	// clockOff is since when the insert clock's trigger has been found gone or disabled (zero while it
	// stamps), and clockWarned when that was last said.
	clockOff, clockWarned time.Time
	hold                  holder // the hold last recorded in the cursor row (zero: none)
	holdWarned            time.Time
	// polled is the poll of the transactions in flight that rode with the last lock of the row (see
	// store.Rider), or the shared poll that lock took instead (see stay); the horizon takes it when the
	// lock it came with is the one held.
	polled source.Observation
	// shares are the Client's shared polls (see pollshare.go), nil for a processor with a TxHandler, and
	// share the one of the source read. woke is when the wait before this batch was woken, for the rows
	// that woke it: a shared poll sent before it would not see them (zero: not woken). sending is when
	// this processor's own poll was last sent.
	shares        *pollShares
	share         *pollShare
	woke, sending time.Time
	// clockMargin is the margin below the horizon on a table read by the insert clock (see margin), and
	// insertLatency, holdWarnAfter Config.InsertLatency and HoldWarnAfter.
	clockMargin, insertLatency, holdWarnAfter time.Duration
	// txHandler says that a TxHandler writes in the cursor transaction: the horizon stays below its start.
	txHandler bool
	process   string
	cur       *store.Repository // set when the processor opens its cursor
	log       zerolog.Logger
	obs       Observer
}

// newHorizonWatch returns the horizon watch of a processor configured by cfg (its defaults set), the
// margin below the horizon on a table read by the insert clock being clockMargin.
func newHorizonWatch[T any](cfg *Config[T], clockMargin time.Duration, log zerolog.Logger, obs Observer) horizonWatch {
	return horizonWatch{tracker: newTracker(cfg.InsertLatency), late: newLateWatch(), clockMargin: clockMargin,
		insertLatency: cfg.InsertLatency, holdWarnAfter: cfg.HoldWarnAfter, txHandler: cfg.TxHandler != nil,
		process: cfg.Process, log: log, obs: obs}
}

// clockStopped says, at once and then every HoldWarnAfter, that the insert clock's trigger is gone or
// disabled, and so the stream waits: an insert may now write the clock's column itself, with any time.
func (hz *horizonWatch) clockStopped(o source.Observation, t *source.Table) {
	if !hz.clockOff.IsZero() && time.Since(hz.clockWarned) < hz.holdWarnAfter {
		return
	}
	if hz.clockOff.IsZero() {
		hz.clockOff = o.Now
	}
	hz.clockWarned = time.Now()
	what, fix := "dropped", source.AddClockCommand(t.Qualified)
	if o.Clock.There {
		what = "disabled"
		fix = fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER %s", t.Ident, source.ClockTrigger)
	}
	hz.log.Error().Str("table", t.Qualified).Time("since", hz.clockOff).
		Msgf("the insert clock's trigger on %s was %s, so an insert may date its row earlier than the position: "+
			"the stream waits until it stamps inserts again: %s", t.Qualified, what, fix)
}

// holdReportAfter is how long a transaction must have held the horizon before it is reported: shorter
// holds are the ordinary life of transactions.
const holdReportAfter = time.Second

func (hz *horizonWatch) noteHold(work context.Context, h horizon, t *source.Table) error {
	var hold holder
	if h.hold != nil && h.now.Sub(h.hold.Since) >= holdReportAfter {
		hold = *h.hold
	}
	if h.hold != nil {
		hz.obs.Hold(hz.process, h.now.Sub(h.hold.Since))
	} else {
		hz.obs.Hold(hz.process, 0)
	}
	if hold != hz.hold {
		if err := hz.cur.Source.SetHold(work, hold.PID, hold.Since); err != nil {
			return err
		}
		if !hold.Since.IsZero() {
			hz.log.Info().Int("pid", hold.PID).Time("since", hold.Since).Str("horizon", string(hz.kind)).
				Msg(holderName(hold) + " holds the horizon; records after its start wait until it ends")
		} else {
			hz.log.Info().Msg("horizon no longer held")
		}
		hz.hold, hz.holdWarned = hold, time.Time{}
	}
	if !hold.Since.IsZero() {
		age := h.now.Sub(hold.Since)
		if age >= hz.holdWarnAfter && time.Since(hz.holdWarned) >= hz.holdWarnAfter {
			hz.holdWarned = time.Now()
			hz.log.Warn().Int("pid", hold.PID).Time("since", hold.Since).Str("held_for", age.Round(time.Millisecond).String()).
				Str("horizon", string(hz.kind)).Msg(hz.holdAdvice(hold, t))
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
func (hz *horizonWatch) holdAdvice(h holder, t *source.Table) string {
	var b strings.Builder
	b.WriteString(holderName(h) + " has held the stream for long; ")
	if h.PID == 0 {
		b.WriteString("finish it with COMMIT PREPARED or ROLLBACK PREPARED (see pg_prepared_xacts)")
	} else {
		fmt.Fprintf(&b, "if it is idle in transaction (SELECT state, query FROM pg_stat_activity WHERE pid = %d), "+
			"end it, or set idle_in_transaction_session_timeout", h.PID)
	}
	if hz.kind == inordertype.HorizonTransactions {
		fmt.Fprintf(&b, "; with created_at set to the transaction's start every open transaction in the database "+
			"holds this stream, not only the table's writers; the insert clock waits only for them: %s",
			source.AddClockCommand(t.Qualified))
	}
	return b.String()
}

// horizon polls the transactions in flight and returns the horizon. When the created_at default has
// changed so that the writers horizon no longer fits, it switches to the transactions horizon for good and
// moves the position back to the earliest start of the transactions that were open across the change:
// they may write rows dated before the position. That redelivers what lies between; it skips nothing.
func (p *Processor[T]) horizon(work context.Context) (horizon, error) {
	o, err := p.hz.poll(work, p.rd.table)
	if err != nil {
		return horizon{}, err
	}
	if wait, err := p.followShape(work, o.Shape); err != nil || wait {
		return horizon{now: o.Now}, err // no read while the source does not fit (see shape.go)
	}
	if p.hz.kind == inordertype.HorizonWriters && !p.rd.table.WritersSafe(o.Default) {
		if err := p.followDefault(work, o); err != nil {
			return horizon{}, err
		}
		if !p.cur.Lock.Locked() { // an operator took the row in the instant after the commit: look again later
			return horizon{now: o.Now}, nil
		}
	}
	return p.hz.observe(o, p.rd.table), nil
}

// followDefault switches to the transactions horizon, o having found a created_at default under which
// the writers horizon no longer fits, and moves the position back to the earliest start of the
// transactions open across the change, made durable at once: a batch that fails later must not take it
// back while the switch stays.
func (p *Processor[T]) followDefault(work context.Context, o source.Observation) error {
	at, unknown := p.hz.tracker.earliestStart()
	pos := p.cur.Position.State().Position
	ev := p.log.Warn().Str("table", p.rd.table.Qualified).Str("default", o.Default).Str("horizon", string(inordertype.HorizonTransactions))
	if !at.IsZero() && at.Before(pos.CreatedAt) {
		back := inordertype.Position{CreatedAt: at.UTC()}
		if err := p.moveBack(work, back); err != nil {
			return err
		}
		ev = ev.Str("from", pos.String()).Str("to", back.String())
	}
	p.hz.kind = inordertype.HorizonTransactions
	p.tenure.sourceSaved = false // the cursor row says the tracking it reads by now, at the next batch
	ev.Msg("the created_at default changed while running: waiting for every open transaction from now on, and " +
		"delivering again from the earliest start of the transactions open across the change")
	if len(unknown) > 0 {
		p.log.Error().Ints("pids", unknown).Time("watched_since", p.hz.tracker.firstPoll).
			Msg("transactions open since before this instance began watching may write rows dated earlier than " +
				"it can see; once they end, if they wrote to the source, rewind to before their start")
	}
	return nil
}

// moveBack moves the position back to back on purpose, durably at once: what lies after it is delivered
// again, so what was remembered of it (the records delivered, the records accepted ahead, the spans
// waiting for their count of late rows) is forgotten.
func (p *Processor[T]) moveBack(work context.Context, back inordertype.Position) error {
	p.tenure.delivered.forget() // delivered again on purpose
	p.exec.attempts.forgetAccepted()
	p.hz.late.forget()
	_, err := p.cur.Lock.Checkpoint(work, back, 0, store.InFlight{})
	return err
}

// poll is the poll of the transactions in flight on t: the one that rode with the lock of the cursor row,
// or, when none came with the lock held (it was taken before the poll's table was known), a poll now.
// Either may be a shared poll another processor of the Client made (see stay).
func (hz *horizonWatch) poll(work context.Context, t *source.Table) (source.Observation, error) {
	if hz.cur.Lock.TakeRide() || hz.stay() {
		return hz.polled, nil
	}
	ctx, cancel := hz.cur.Session.Bounded(work)
	o, err := t.PollLocks(ctx, hz.cur.Lock.Tx())
	cancel()
	if err != nil {
		return source.Observation{}, err
	}
	hz.offer(o)
	return o, nil
}

// stay reports whether this batch takes the shared poll of its source (see pollshare.go) instead of
// polling itself, and if so makes it the poll the horizon takes; if not, the poll about to be sent is
// stamped, for the others to know how fresh it is. It is asked with the connection in hand, right
// before the poll would be sent, so that of many processors waiting for a connection at once the first
// polls and the rest take its poll.
func (hz *horizonWatch) stay() bool {
	if hz.share == nil {
		return false
	}
	now := time.Now()
	o, sent := hz.share.latest()
	need := hz.woke
	hz.woke = time.Time{}
	if takes(o.Now, sent, hz.tracker.lastPoll, need, now) {
		hz.polled = o
		return true
	}
	hz.sending = now
	return false
}

// offer gives the processor's own poll, sent when stay last said so, to the others.
func (hz *horizonWatch) offer(o source.Observation) {
	if hz.share != nil {
		hz.share.offer(o, hz.sending)
	}
}

// observe folds o, a poll of the transactions in flight on t, into the tracker and returns the horizon:
// none while the insert clock does not stamp, and below the cursor transaction's start when a
// transactional handler may write to the source itself.
func (hz *horizonWatch) observe(o source.Observation, t *source.Table) horizon {
	hz.tracker.guard = hz.margin()
	h := hz.tracker.observe(o, hz.kind)
	if hz.kind == inordertype.HorizonClock && !o.Clock.Stamps() {
		hz.clockStopped(o, t)
		h.at = time.Time{} // an insert may write the clock itself now: nothing is read until it stamps again
	} else if !hz.clockOff.IsZero() {
		hz.log.Info().Str("table", t.Qualified).Msg("the insert clock stamps inserts again; reading on")
		hz.clockOff = time.Time{}
	}
	if hz.txHandler && hz.kind == inordertype.HorizonTransactions {
		// A transactional handler may insert into the source itself, in the cursor transaction, whose rows
		// then carry its start: read only below it.
		if capAt := o.TxStart.Add(-hz.insertLatency); !h.at.IsZero() && capAt.Before(h.at) {
			h.at = capAt
		}
	}
	return h
}

// rideLocks sends the poll of the transactions in flight for t with every lock of the cursor row, but
// when a shared poll of t will do (see stay).
func (hz *horizonWatch) rideLocks(t *source.Table) {
	sql, args := t.LocksQuery()
	rider := &store.Rider{SQL: sql, Args: args, ScanFunc: func(rows pgx.Rows) (err error) {
		if hz.polled, err = source.ScanLocks(rows); err == nil {
			hz.offer(hz.polled)
		}
		return err
	}}
	hz.share = nil
	if hz.shares != nil && !hz.txHandler {
		hz.share = hz.shares.of(t)
		rider.StayFunc = hz.stay
	}
	hz.cur.Lock.SetRider(rider)
}

// margin is the safety margin below the horizon for what this processor reads by now: Config.InsertLatency,
// or on a table read by the insert clock, when InsertLatency was not set, clockInsertLatency. The clock
// stamps a row in a BEFORE INSERT trigger, after its transaction took the lock on the table that the poll
// of pg_locks sees, and the poll is stamped before it reads the locks: a transaction it did not see stamps
// its rows later than the poll by the database's one clock, margin or not. What is left to cover is that
// clock stepping back between the two (see docs/horizon.md).
func (hz *horizonWatch) margin() time.Duration {
	if hz.kind == inordertype.HorizonClock {
		return hz.clockMargin
	}
	return hz.insertLatency
}
