package processor

import (
	"context"
	"slices"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// The keyed window: with MaxInFlight above 1, a Handler gets several records at once, in order per key.
//
// The window is a stretch of MaxInFlight records of the batch starting at the first record not yet
// completed (the head). A record in the window starts when no earlier record of its key is still
// incomplete; a record without a key starts only when every record before it has completed, and no
// record after it starts before it completes. So records of one key go one at a time in (created_at, id)
// order, keyless records are totally ordered with everything around them, and at most MaxInFlight
// records are in flight, or completed ahead of the head.
//
// The position is the end of the contiguous prefix of completed records: it moves only past records that
// succeeded and every record before them. With CheckpointRecord, each advance of the prefix is committed
// once, however many records completed together. A crash delivers again at most the window: the records
// after the durable prefix, some of which had succeeded already (with the same idempotency key).
//
// When a record fails, nothing after it starts; the records in flight finish (within one handler
// timeout), the prefix moves as far as they allow, and the stream halts on the first record in order that
// did not succeed, exactly as one record at a time: backoff, status, skip. When the failure says that the
// sink pauses (its outage, or a Retry-After), nothing starts at all, not even the records before it: stop
// means stop, until the backoff ends. Records of other keys after it that the sink accepted are not sent
// again by this instance: they count as succeeded when the batch is read again, until the position passes
// them (see attempts.accepted). Those that failed, or were still in flight, go out again with their next
// attempt number.

// done is the outcome of one record's handler call in the window.
type done struct {
	i    int
	err  error
	took time.Duration
}

// slot is where one record of the batch is in the window.
type slot int

const (
	waiting   slot = iota // not started
	flying                // its handler runs
	succeeded             // its handler returned nil
	parked                // parked (OnHaltPark): complete without having gone through
	failed                // its handler returned an error
)

// window is the keyed window over one batch: which records are where, and how far the prefix of
// completed records reaches.
type window[T any] struct {
	p       *Processor[T]
	ctx     context.Context
	work    context.Context
	st      inordertype.State
	items   []item[T]
	slots   []slot
	fates   []fate // the fate of each record that failed or parked
	began   []time.Time
	results chan done
	// head is the first record not succeeded; inFlight counts the records whose handler runs; durable is
	// the head as the last commit left it (CheckpointRecord), before which nothing is delivered again.
	head, inFlight, durable int
	// failedAt is the first record in order that failed: nothing from it on starts any more, but the
	// records before it still do, so that the prefix reaches it and the stream halts on it.
	failedAt int
	// stopping: the context is done, the cursor is lost, or the sink said to pause; start nothing more.
	stopping bool
	// paused: a record failed in a way that says the sink pauses (see pauses); its failure ends the batch
	// even when records before it did not start.
	paused bool
	warned int // the record last warned about for being in flight long
	o      outcome[T]
	// committing is the commit of an advance on its way (see commit), nil when none; it makes the head
	// committingHead durable. While it is on its way nothing else uses the cursor connection, and the
	// lease is known to cover a handler call until coveredUntil, as it did when the commit was sent.
	committing     *sentCheckpoint
	committingHead int
	coveredUntil   time.Time
}

// deliverWindow hands the records of a batch to the Handler, up to MaxInFlight at once, in order per key.
func (p *Processor[T]) deliverWindow(ctx, work context.Context, st inordertype.State, items []item[T]) outcome[T] {
	p.exec.attempts.forgetPassed(st.Position)
	w := &window[T]{p: p, ctx: ctx, work: work, st: st, items: items, slots: make([]slot, len(items)),
		fates: make([]fate, len(items)), began: make([]time.Time, len(items)), results: make(chan done, len(items)),
		failedAt: len(items), warned: -1, o: outcome[T]{last: st.Position}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if !w.stopping && ctx.Err() == nil {
			before := w.head
			w.start()
			w.advance() // past the records parked without a handler call
			if w.inFlight == 0 && w.head > before && w.head < w.failedAt && !w.stopping {
				continue // only parked records went: the window moved on, so start what it reaches now
			}
		}
		// The advance is committed once the window is full again: the records it freed are in flight
		// during the commit's round trip, and those that complete meanwhile are taken, and ride the next
		// commit.
		w.commit()
		if w.inFlight == 0 {
			if w.committing != nil {
				w.joinCommit()
				continue
			}
			if !w.stopping && ctx.Err() == nil && w.head < w.failedAt && w.head < len(w.items) {
				continue // the commit let the window move on: start what it reaches now
			}
			break
		}
		var committed chan struct{}
		if w.committing != nil {
			committed = w.committing.done
		}
		select {
		case d := <-w.results:
			w.take(d)
			w.advance()
		case <-committed:
			w.joinCommit()
		case <-tick.C:
			w.joinCommit()
			w.watch()
		}
		if ctx.Err() != nil {
			w.stopping = true
		}
	}
	w.joinCommit()
	w.noteInFlight(store.InFlight{})
	if slices.Contains(w.slots[w.head:], parked) {
		// Records parked ahead of the prefix, whose rows are not stored: the keys they marked parked are
		// read again.
		p.parked.keys = nil
	}
	if w.o.err == nil && !w.o.lost && p.cur.Lock.Locked() {
		w.o.err = p.cur.Position.SetInFlight(work, store.InFlight{})
	}
	if w.head < len(items) && w.slots[w.head] == failed {
		w.o.failed, w.o.fate = &items[w.head], w.fates[w.head]
	} else if w.paused && w.failedAt < len(items) && w.o.err == nil && !w.o.lost {
		// The sink paused before the records ahead of the failure started: the stream waits on the
		// failure all the same, and the records before it go first after the wait.
		w.o.failed, w.o.fate = &items[w.failedAt], w.fates[w.failedAt]
	}
	for i := w.head; i < len(items); i++ {
		if w.slots[i] == succeeded {
			p.exec.accept(&items[i], p.tenure.gen) // accepted is accepted: not sent again while the position stays before it
		}
	}
	// The records of other keys that went out ahead of the head go out again after it, as their next
	// attempt.
	p.exec.settled(items, w.o.n, func(i int) bool { return !w.began[i].IsZero() })
	return w.o
}

// start sends every record of the window that may go now, once the lease covers their calls (see
// Processor.covered).
func (w *window[T]) start() {
	if w.committing != nil && !time.Now().Before(w.coveredUntil) {
		w.joinCommit() // the lease may need renewing, on the cursor connection
	}
	if w.o.err == nil && !w.o.lost && w.committing == nil {
		f, _ := w.oldest()
		if !w.p.covered(w.work, &w.o, f) {
			w.stopping = true
			return
		}
	}
	busy := map[string]bool{} // keys with an incomplete record before the one looked at
	// A crash delivers again at most MaxInFlight records: none starts that far past the durable position,
	// even while the commit of an advance is under way.
	end := w.head + w.p.cfg.MaxInFlight
	if w.p.cfg.Checkpoint == CheckpointRecord {
		end = min(end, w.durable+w.p.cfg.MaxInFlight)
	}
	for i := w.head; i < w.failedAt && i < end; i++ {
		key := w.items[i].rec.Key
		switch {
		case w.slots[i] == succeeded || w.slots[i] == parked:
			continue
		case w.slots[i] == waiting && w.p.exec.acceptedBefore(&w.items[i], w.p.tenure.gen):
			// The sink accepted it while a record before it failed: it is not sent again. (Every earlier
			// record of its key had succeeded before it started.)
			w.slots[i] = succeeded
			continue
		case w.slots[i] != waiting:
			busy[key] = true
			if key == "" {
				return // a keyless record holds everything after it
			}
			continue
		case key == "" && i != w.head:
			return // a keyless record waits for everything before it
		case busy[key]:
			continue
		}
		it := &w.items[i]
		it.rec.Attempt = w.p.exec.attempt(w.st, it)
		if w.p.parked.has(it.rec.Key) {
			// Parked behind its key without reaching the handler: complete at once. (No record of a
			// parked key is in flight: its first failed, and the key's next had waited for it.)
			w.parkAt(i, w.p.exec.fateOf(w.ctx, w.work, w.st, it, nil, true))
			continue
		}
		busy[key] = true
		w.p.exec.sending(it)
		w.slots[i], w.inFlight, w.began[i] = flying, w.inFlight+1, time.Now()
		go func(i int, it *item[T]) {
			t0 := time.Now()
			err := w.p.exec.handleConcurrently(w.work, it)
			w.results <- done{i: i, err: err, took: time.Since(t0)}
		}(i, it)
		if key == "" {
			return
		}
	}
}

// take records d and every other result there is, so that records completing together advance the
// prefix once.
func (w *window[T]) take(d done) {
	for {
		if d.err != nil {
			w.joinCommit() // its fate reads the lease's clock
		}
		w.inFlight--
		w.p.obs.Handled(w.p.cfg.Process, d.took, d.err)
		w.p.exec.refusals.note(w.items[d.i].rec.Key, d.err)
		switch f := w.p.exec.fateOf(w.ctx, w.work, w.st, &w.items[d.i], d.err, false); f.kind {
		case fatePark:
			w.parkAt(d.i, f)
		case fateDelivered:
			w.slots[d.i] = succeeded
		default: // the prefix stops at it
			w.slots[d.i], w.fates[d.i] = failed, f
			w.failedAt = min(w.failedAt, d.i)
			if pauses(f) {
				w.paused, w.stopping = true, true
			}
		}
		select {
		case d = <-w.results:
			continue
		default:
		}
		return
	}
}

// pauses reports whether f, a failing record's fate, says that the sink pauses: its outage (a refusal
// every record would meet, a 429 or a 503 among them), or a Retry-After. No new record starts then until
// the stream's backoff ends.
func pauses(f fate) bool {
	return f.kind == fateUnavailable || f.v.retryAfter > 0
}

// parkAt parks record i, whose fate is f (its key's first, fatePark, or behind the key,
// fateParkedBehind): it counts as complete, and the key's later records park behind it at once. Its row
// is stored when the prefix reaches it (advance), in the transaction that moves the position past it, so
// that no parked row lies ahead of the position.
func (w *window[T]) parkAt(i int, f fate) {
	w.slots[i], w.fates[i] = parked, f
	if f.kind == fatePark {
		w.p.parked.mark(w.items[i].rec.Key)
	}
}

// advance moves the prefix past the records that succeeded (or parked) at its head; commit makes the
// advance durable.
func (w *window[T]) advance() {
	moved := false
	for w.head < len(w.items) && (w.slots[w.head] == succeeded || w.slots[w.head] == parked) {
		it := &w.items[w.head]
		if w.slots[w.head] == parked {
			w.joinCommit() // the parked row is stored on the cursor connection
			if err := w.p.park(w.work, w.st, it, w.fates[w.head].v); err != nil {
				w.o.err, w.stopping = err, true
				break
			}
		} else {
			w.p.failing.resumed(it.rec.ID, it.rec.Attempt)
		}
		w.o.last, w.o.n, moved = it.pos, w.o.n+1, true
		w.head++
	}
	if !moved {
		return
	}
	f, _ := w.oldest()
	w.noteInFlight(f)
}

// commit makes the prefix's advance durable, with CheckpointRecord, once for however many records it
// passed since the last commit. The commit goes on while the window takes results and starts records, up
// to MaxInFlight past the position durable before it (see sendCheckpoint); one at a time, the next once it
// is answered (joinCommit).
func (w *window[T]) commit() {
	if w.committing != nil || w.p.cfg.Checkpoint != CheckpointRecord || w.o.err != nil || w.o.lost ||
		w.o.n == w.o.counted {
		return
	}
	// Whatever is in flight still finishes when this fails; only its advance is not recorded.
	f, _ := w.oldest()
	w.coveredUntil = w.p.exec.coveredUntil() // a commit renews the lease, if at all; it never shortens it
	w.committing = w.p.sendCheckpoint(w.work, w.o.last, w.o.n-w.o.counted, f, w.head == len(w.items))
	w.committingHead, w.o.counted = w.head, w.o.n
}

// joinCommit waits for the commit on its way, if any, and takes its answer: the head it made durable, or
// the failure that ends the batch.
func (w *window[T]) joinCommit() {
	c := w.committing
	if c == nil {
		return
	}
	<-c.done
	w.committing = nil
	stillLocked, err := c.finish()
	if err != nil || !stillLocked {
		w.o.checkpointed(stillLocked, err)
		w.stopping = true
		return
	}
	w.durable = w.committingHead
}

// watch runs every second while records are in flight: it reports what is in flight, warns once about a
// record in flight for long, and keeps the idle cursor transaction from the idle timeout, which would end
// the session and the process's ownership.
func (w *window[T]) watch() {
	f, at := w.oldest()
	w.noteInFlight(f)
	if at >= 0 && at != w.warned && time.Since(f.Since) >= w.p.cfg.HandlerTimeout/2 {
		w.warned = at
		w.p.log.Warn().Str("record", w.items[at].rec.ID).Str("key", w.items[at].rec.Key).
			Str("in_flight_for", time.Since(f.Since).Round(time.Millisecond).String()).Int("in_flight", f.Records).
			Msg("a record has been in flight for long; the position waits on it")
	}
	if w.o.err == nil && !w.o.lost && w.committing == nil && w.p.cur.Lock.Locked() {
		ctx, cancel := w.p.cur.Session.Bounded(w.work)
		_, err := w.p.cur.Lock.Tx().Exec(ctx, "SELECT 1")
		cancel()
		if err != nil {
			w.o.err, w.stopping = err, true
		}
	}
}

// oldest is what is in flight: how many records, and since when the oldest of them (at its index, -1
// for none).
func (w *window[T]) oldest() (store.InFlight, int) {
	f, at := store.InFlight{Records: w.inFlight}, -1
	for i := w.head; i < len(w.items) && i < w.head+w.p.cfg.MaxInFlight; i++ {
		if w.slots[i] == flying && (at < 0 || w.began[i].Before(f.Since)) {
			f.Since, at = w.began[i], i
		}
	}
	return f, at
}

// noteInFlight tells the observer what is in flight.
func (w *window[T]) noteInFlight(f store.InFlight) {
	var age time.Duration
	if f.Records > 0 {
		age = time.Since(f.Since)
	}
	w.p.obs.InFlight(w.p.cfg.Process, f.Records, age)
}

// handleConcurrently runs the Handler on one record of the window, under a timeout of its own (the
// executor's reusable deadline serves one call at a time).
func (e *executor[T]) handleConcurrently(work context.Context, it *item[T]) (err error) {
	hctx, cancel := context.WithTimeoutCause(work, e.deadline.timeout, errHandlerTimeout{d: e.deadline.timeout})
	defer cancel()
	hctx = startAttempt(e.tracing, hctx, it)
	err = e.guarded(hctx, &it.rec, func() error { return e.handler.Handle(hctx, &it.rec) })
	endAttempt(it, err)
	return err
}
