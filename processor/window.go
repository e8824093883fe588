package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/cursorlock"
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
// When a record fails, nothing more starts; the records in flight finish (within one handler timeout),
// the prefix moves as far as they allow, and the stream halts on the first record in order that did not
// succeed, exactly as one record at a time: backoff, status, skip. Records of other keys after it that had
// succeeded are delivered again once it goes through or is skipped.

// done is the outcome of one record's handler call in the window.
type done struct {
	i    int
	err  error
	took time.Duration
}

// deliverWindow hands the records of a batch to the Handler, up to MaxInFlight at once, in order per key.
func (p *Processor[T]) deliverWindow(ctx, work context.Context, st cursorlock.State, items []item[T]) (int, time.Duration, error) {
	const (
		waiting = iota
		flying
		succeeded
		failed
	)
	state := make([]int, len(items))
	errs := make([]error, len(items))
	began := make([]time.Time, len(items))
	results := make(chan done, len(items))
	head, inFlight, n := 0, 0, 0 // first record not succeeded; records in flight; records the prefix passed
	counted := 0                 // records the prefix passed that a checkpoint has counted
	last := st.Position
	stopping := false // the context is done or the cursor is lost: start nothing more
	// failedAt is the first record in order that failed: nothing from it on starts any more, but the
	// records before it still do, so that the prefix reaches it and the stream halts on it.
	failedAt := len(items)

	// start sends every record of the window that may go now.
	start := func() {
		busy := map[string]bool{} // keys with an incomplete record before the one looked at
		for i := head; i < failedAt && i < head+p.cfg.MaxInFlight; i++ {
			key := items[i].rec.Key
			switch {
			case state[i] == succeeded:
				continue
			case state[i] != waiting:
				busy[key] = true
				if key == "" {
					return // a keyless record holds everything after it
				}
				continue
			case key == "" && i != head:
				return // a keyless record waits for everything before it
			case busy[key]:
				continue
			}
			busy[key] = true
			state[i], inFlight, began[i] = flying, inFlight+1, time.Now()
			it := &items[i]
			it.rec.Attempt = attemptOf(st, it.rec.ID)
			go func(i int, rec *handlers.Record[T]) {
				t0 := time.Now()
				err := p.handleConcurrently(work, rec)
				results <- done{i: i, err: err, took: time.Since(t0)}
			}(i, &it.rec)
			if key == "" {
				return
			}
		}
	}

	// oldest is what is in flight: how many records, and since when the oldest of them.
	oldest := func() (cursorlock.InFlight, int) {
		f, at := cursorlock.InFlight{Records: inFlight}, -1
		for i := head; i < len(items) && i < head+p.cfg.MaxInFlight; i++ {
			if state[i] == flying && (at < 0 || began[i].Before(f.Since)) {
				f.Since, at = began[i], i
			}
		}
		return f, at
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	warned := -1 // the record last warned about

	var cperr error
	lost := false
	for {
		if !stopping && ctx.Err() == nil {
			start()
		}
		if inFlight == 0 {
			break
		}
		// Take every result there is, so that records completing together advance the prefix once.
		var d done
		select {
		case d = <-results:
		case <-tick.C:
			f, at := oldest()
			p.noteInFlight(f)
			if at >= 0 && at != warned && time.Since(f.Since) >= p.cfg.HandlerTimeout/2 {
				warned = at
				p.log.Warn().Str("record", items[at].rec.ID).Str("key", items[at].rec.Key).
					Str("in_flight_for", time.Since(f.Since).Round(time.Millisecond).String()).Int("in_flight", f.Records).
					Msg("a record has been in flight for long; the position waits on it")
			}
			// The cursor transaction idles while records are in flight: keep it from the idle timeout,
			// which would end the session and the process's ownership.
			if cperr == nil && !lost && p.cur.Locked() {
				if _, err := p.cur.Tx().Exec(work, "SELECT 1"); err != nil {
					cperr, stopping = err, true
				}
			}
			continue
		}
		for {
			inFlight--
			p.obs.Handled(p.cfg.Process, d.took, d.err)
			if d.err != nil {
				state[d.i], errs[d.i] = failed, d.err
				failedAt = min(failedAt, d.i)
			} else {
				state[d.i] = succeeded
			}
			select {
			case d = <-results:
				continue
			default:
			}
			break
		}
		moved := false
		for head < len(items) && state[head] == succeeded {
			last, n, moved = items[head].pos, n+1, true
			p.resumed(&items[head].rec)
			head++
		}
		if moved {
			f, _ := oldest()
			p.noteInFlight(f)
			if p.cfg.Checkpoint == CheckpointRecord && !lost && cperr == nil {
				stillLocked, err := p.checkpoint(work, last, n-counted, f)
				counted = n
				if err != nil || !stillLocked {
					// Whatever is in flight still finishes; only its advance is not recorded here.
					cperr, lost, stopping = err, err == nil, true
				}
			}
		}
		if ctx.Err() != nil {
			stopping = true
		}
	}
	p.noteInFlight(cursorlock.InFlight{})
	if cperr == nil && !lost && p.cur.Locked() {
		cperr = p.cur.SetInFlight(work, cursorlock.InFlight{})
	}
	switch {
	case cperr != nil || lost:
		return n, 0, cperr
	case head < len(items) && state[head] == failed && !(ctx.Err() != nil && work.Err() != nil):
		return n, p.fail(work, last, &items[head].rec, errs[head]), nil
	default:
		return n, 0, p.finish(work, st.Position, last, n)
	}
}

// InFlightObserver is an Observer that is also told what a keyed window has in flight (see
// Config.MaxInFlight): how many records, and for how long the oldest of them (0 for none). Its method
// must not block.
type InFlightObserver interface {
	InFlight(process string, records int, oldest time.Duration)
}

func (p *Processor[T]) noteInFlight(f cursorlock.InFlight) {
	if o, ok := p.obs.(InFlightObserver); ok {
		var age time.Duration
		if f.Records > 0 {
			age = time.Since(f.Since)
		}
		o.InFlight(p.cfg.Process, f.Records, age)
	}
}

// handleConcurrently runs the Handler on one record of the window, under a timeout of its own (the
// processor's reusable deadline serves one call at a time).
func (p *Processor[T]) handleConcurrently(work context.Context, rec *handlers.Record[T]) (err error) {
	hctx, cancel := context.WithTimeoutCause(work, p.cfg.HandlerTimeout, errHandlerTimeout{p.cfg.HandlerTimeout})
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = p.panicked(rec, r)
		}
		err = explain(hctx, err)
	}()
	return p.cfg.Handler.Handle(hctx, rec)
}

// windowed reports whether records go through the keyed window.
func (p *Processor[T]) windowed() bool {
	return p.cfg.MaxInFlight > 1 && p.cfg.Handler != nil && p.async == nil
}
