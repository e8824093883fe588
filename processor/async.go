package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// The async window: an AsyncHandler is sent up to its MaxInFlight records at once, in order, and their
// results settle in the same order, the position moving past each record that settles well. The first
// record in order that fails ends the batch: nothing more is sent, the records before it settle, and what
// was sent after it is waited out and not counted: what the sink accepted of it is not sent again by this
// instance (it settles as delivered when its turn comes again), the rest is delivered again (see
// attempts).
//
// A record of a parked key is not sent: it takes its turn in the window, and parks behind its key when
// its turn comes. A record the sink refuses at once (Send fails) takes its turn likewise, and nothing more
// is sent until then: the records before it settle first, and its fate, decided once in its turn (settle)
// as a sent record's is, says whether the sends go on (its key parked) or end at it (the batch fails on
// it). What decides that fate may change between the refusal and the turn: the refusals of the records
// before it may show with its own that the sink is out (fateUnavailable: the key is not parked); an
// earlier record of its key may park the key meanwhile (fateParkedBehind); the shutdown timeout may cut it
// off (fateCutOff).

// asyncWindow is the async window over one batch.
type asyncWindow[T any] struct {
	p     *Processor[T]
	ctx   context.Context
	work  context.Context
	st    inordertype.State
	items []item[T]
	maxIn int
	// flights are the records awaiting their turn to settle, oldest first.
	flights []flight[T]
	// called says which records were handed to the sink.
	called []bool
	o      outcome[T]
}

// flight is a record of the async window awaiting its turn.
type flight[T any] struct {
	it  *item[T]
	res handlers.Result // nil: not sent, it parks behind its key in its turn (or was accepted before)
	// accepted says that the sink accepted it in this tenure while a record before it failed: it is not
	// sent again, and settles as delivered in its turn (see attempts.accepted).
	accepted bool
	// sent is when it was sent: its wait ends HandlerTimeout after it, as the lease that covered the send does.
	sent time.Time
}

// deliverAsync keeps up to MaxInFlight records in flight and advances as results settle in order.
func (p *Processor[T]) deliverAsync(ctx, work context.Context, st inordertype.State, items []item[T]) outcome[T] {
	maxIn := max(1, p.async.MaxInFlight())
	p.exec.attempts.forgetPassed(st.Position)
	a := &asyncWindow[T]{p: p, ctx: ctx, work: work, st: st, items: items, maxIn: maxIn,
		called: make([]bool, len(items)), o: outcome[T]{last: st.Position}}
	defer func() { p.exec.settled(items, a.o.n, func(i int) bool { return a.called[i] }) }()
	for goOn := a.send(); goOn && len(a.flights) > 0; {
		goOn = a.settle()
	}
	a.drain()
	return a.o
}

// send hands the batch's records to the sink in order, settling the oldest whenever the window is full.
// It reports whether to settle what is still in flight: false once a record failed or the batch must end
// (what is in flight is then waited out, not counted: a failure may lie before it).
func (a *asyncWindow[T]) send() bool {
	p := a.p
	for i := range a.items {
		if a.ctx.Err() != nil {
			return true
		}
		if !a.covered() {
			return false
		}
		it := &a.items[i]
		it.rec.Attempt = p.exec.attempt(a.st, it)
		if p.parked.has(it.rec.Key) {
			if !a.add(flight[T]{it: it, sent: time.Now()}) { // parked in its turn, without reaching the sink
				return false
			}
			continue
		}
		if p.exec.acceptedBefore(it, p.tenure.gen) { // accepted is accepted: it settles in its turn, not sent again
			if !a.add(flight[T]{it: it, accepted: true, sent: time.Now()}) {
				return false
			}
			continue
		}
		sent := time.Now()
		sctx, cancel := context.WithDeadline(a.work, sent.Add(p.cfg.HandlerTimeout))
		a.called[i] = true
		res, serr := p.async.Send(startAttempt(&p.tracing, sctx, it), &it.rec)
		cancel()
		if serr != nil {
			// Refused before it was sent: it takes its turn, the records before it settling first, and
			// nothing more is sent until its fate, decided then, says whether to go on (see the comment at
			// the top of this file).
			res = failedResult{serr}
		}
		if !a.add(flight[T]{it: it, res: res, sent: sent}) {
			return false
		}
		for serr != nil && len(a.flights) > 0 {
			if !a.settle() {
				return false
			}
		}
	}
	return true
}

// add puts f in the window, and settles the oldest once the window is full. It reports whether to go on.
func (a *asyncWindow[T]) add(f flight[T]) bool {
	a.flights = append(a.flights, f)
	return len(a.flights) < a.maxIn || a.settle()
}

// settle waits for the oldest result, applies its record's fate and advances past it; it reports whether
// to go on.
func (a *asyncWindow[T]) settle() bool {
	p := a.p
	f := a.flights[0]
	a.flights = a.flights[1:]
	if f.accepted {
		return a.advance(f)
	}
	wctx, cancel := context.WithDeadline(a.work, f.sent.Add(p.cfg.HandlerTimeout))
	defer cancel()
	start := time.Now()
	var werr error
	if f.res != nil {
		werr = f.res.Wait(wctx)
		p.obs.Handled(p.cfg.Process, time.Since(start), werr)
		p.exec.refusals.note(f.it.rec.Key, werr)
	}
	// Parked behind its key: a record sent before the key was parked is delivered again after the key's
	// first record, whatever the sink said of it.
	var err error
	switch v := p.exec.fateOf(a.ctx, a.work, a.st, f.it, werr, f.res == nil || p.parked.has(f.it.rec.Key)); v.kind {
	case fateParkedBehind:
		err = p.park(a.work, a.st, f.it, verdict{})
	case fatePark:
		endAttempt(f.it, werr)
		err = p.park(a.work, a.st, f.it, v.v)
	case fateDelivered:
		endAttempt(f.it, nil)
		p.failing.resumed(f.it.rec.ID, f.it.rec.Attempt)
	default:
		endAttempt(f.it, werr)
		a.o.failed, a.o.fate = f.it, v
		return false
	}
	if err != nil {
		a.o.err = err
		return false
	}
	return a.advance(f)
}

// advance moves the position past f's record, which settled well (or parked), and reports whether to go
// on.
func (a *asyncWindow[T]) advance(f flight[T]) bool {
	p := a.p
	a.o.last, a.o.n = f.it.pos, a.o.n+1
	if p.cfg.Checkpoint == CheckpointRecord {
		a.o.counted = a.o.n
		return a.o.checkpointed(p.checkpoint(a.work, a.o.last, 1, store.InFlight{}, f.it == &a.items[len(a.items)-1]))
	}
	return true
}

// covered is Processor.covered for the async window: what is in flight settles first, so that the
// renewal commits a position with nothing ahead of it in flight.
func (a *asyncWindow[T]) covered() bool {
	p := a.p
	need := p.cfg.HandlerTimeout + leaseMargin(p.cfg.Lease)
	if left := p.cur.Lease.LeaseLeft(); left >= need && left >= p.cfg.Lease*2/3 {
		return true
	}
	for range len(a.flights) {
		if !a.settle() {
			return false
		}
	}
	return p.covered(a.work, &a.o, store.InFlight{})
}

// drain waits out whatever is still in flight after a failure: the position does not pass it, and what
// the sink accepted of it is remembered, not sent again (see attempts.accepted); the rest is delivered
// again. One deadline for all of it, so that a sink that hangs cannot keep the cursor transaction idle
// for longer than one handler call.
func (a *asyncWindow[T]) drain() {
	ctx, cancel := context.WithTimeout(a.work, a.p.cfg.HandlerTimeout)
	defer cancel()
	for _, f := range a.flights {
		switch {
		case f.accepted:
			a.p.exec.accept(f.it, a.p.tenure.gen) // still accepted, for the next read
		case f.res != nil && !a.p.parked.has(f.it.rec.Key):
			if f.res.Wait(ctx) == nil {
				a.p.exec.accept(f.it, a.p.tenure.gen)
			}
		case f.res != nil:
			_ = f.res.Wait(ctx)
		}
	}
}

// failedResult is the settled failure of a record the sink refused before it was sent.
type failedResult struct{ err error }

func (r failedResult) Wait(context.Context) error { return r.err }
