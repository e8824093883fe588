package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// outcome is what delivering a batch came to, whatever the strategy (one at a time, the keyed window, an
// AsyncHandler). The batch turns it into the position, the halt and the next wait in one place.
type outcome[T any] struct {
	// n counts the records the position moved past, and last is where it moved to: after the last record
	// of the contiguous prefix that succeeded.
	n    int
	last inordertype.Position
	// counted is how many of the n records a commit has counted already (a record checkpoint, a renewal
	// of the lease in the middle of a batch).
	counted int
	// failed is the first record in order that did not succeed, nil when none failed, and fate is its
	// fate (decideFate), with the error it failed with.
	failed *item[T]
	fate   fate
	// err is a checkpoint that failed; lost says that the cursor went to another instance between a
	// checkpoint's commit and the relock. Either way the batch ends there, with nothing more to record.
	err  error
	lost bool
}

// checkpointed records what a per-record checkpoint came to, reporting whether to go on.
func (o *outcome[T]) checkpointed(stillLocked bool, err error) bool {
	o.err, o.lost = err, err == nil && !stillLocked
	return err == nil && stillLocked
}

// cutOff reports that the shutdown timeout cut a handler off: its failure is not the record's fault, so
// it is not recorded, and the record is delivered again by whoever runs the process next.
func cutOff(ctx, work context.Context) bool { return ctx.Err() != nil && work.Err() != nil }

// deliverSync hands records to a Handler or TxHandler one at a time.
func (p *Processor[T]) deliverSync(ctx, work context.Context, st inordertype.State, items []item[T]) outcome[T] {
	p.exec.attempts.forgetPassed(st.Position)
	o := outcome[T]{last: st.Position}
	called := -1 // the last record handed to the handler
	deliver := func(i int, now time.Time) error { called = i; return p.exec.deliverAt(work, &items[i], now) }
	defer func() { p.exec.settled(items, o.n, func(i int) bool { return i <= called }) }()
	for i := range items {
		if ctx.Err() != nil {
			break // stopping: the records not yet started stay ahead of the position
		}
		now := time.Now() // one read of the clock for the lease's cover and the call's start
		if !p.exec.leaseCovers(now) {
			if !p.covered(work, &o, store.InFlight{}) {
				break
			}
			now = time.Now()
		}
		it := &items[i]
		it.rec.Attempt = p.exec.attempt(st, it)
		behind := p.parked.has(it.rec.Key)
		var err error
		if !behind {
			err = deliver(i, now)
		}
		f := p.exec.fateOf(ctx, work, st, it, err, behind)
		switch {
		case f.kind == fateAbort:
			o.err = err
		case f.fails():
			o.failed, o.fate = it, f
		case f.kind == fatePark || f.kind == fateParkedBehind:
			o.err = p.park(work, st, it, f.v)
		default:
			p.failing.resumed(it.rec.ID, it.rec.Attempt)
		}
		if o.err != nil || o.failed != nil {
			break
		}
		o.last, o.n = it.pos, o.n+1
		if p.cfg.Checkpoint == CheckpointRecord {
			o.counted = o.n
			if !o.checkpointed(p.checkpoint(work, o.last, 1, store.InFlight{}, i == len(items)-1)) {
				break
			}
		}
	}
	return o
}

// deliver runs the handler on one record, inside a savepoint for a TxHandler so that a failure rolls
// back its own writes only. The handler's context carries the attempt's span.
func (e *executor[T]) deliver(work context.Context, it *item[T]) error {
	return e.deliverAt(work, it, time.Now())
}

// deliverAt is deliver at now, the clock read by the caller for it.
func (e *executor[T]) deliverAt(work context.Context, it *item[T], now time.Time) (err error) {
	rec := &it.rec
	call := e.deadline.startAt(work, e.callLimit(), now)
	hctx := startAttempt(e.tracing, call, it)
	defer func() {
		call.end()
		e.obs.Handled(e.process, time.Since(call.began), err)
		if e.handler != nil {
			e.refusals.note(rec.Key, err)
		}
		endAttempt(it, err)
	}()
	if e.handler != nil {
		return e.guarded(hctx, rec, func() error { return e.handler.Handle(hctx, rec) })
	}
	return e.inSavepoint(hctx, work, rec, func(tx pgx.Tx) error { return e.txHandler.HandleTx(hctx, tx, rec) })
}

// guarded calls a handler: a panic becomes rec's failure, and a failure caused by the handler timeout
// says so.
func (e *executor[T]) guarded(hctx context.Context, rec *handlers.Record[T], call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = e.panicked(rec, r)
		}
		err = explain(hctx, err)
	}()
	return call()
}

// inSavepoint calls a transactional handler in a savepoint of the cursor transaction, guarded: released
// when the call succeeds, rolled back when it fails or panics, so that nothing it wrote stays beside the
// halt state or the records delivered after it.
func (e *executor[T]) inSavepoint(hctx, work context.Context, rec *handlers.Record[T], call func(pgx.Tx) error) error {
	sp, err := e.cur.Lock.Tx().Begin(hctx)
	if err != nil {
		return explain(hctx, fmt.Errorf("savepoint: %w", err))
	}
	return endSavepoint(work, sp, e.guarded(hctx, rec, func() error { return call(sp) }))
}

// batchError is a failure of the cursor transaction itself, not of a record: what it holds cannot be
// trusted, so the batch is aborted (everything since the last commit rolled back) and read again.
type batchError struct{ err error }

func (e batchError) Error() string { return e.err.Error() }
func (e batchError) Unwrap() error { return e.err }

// isBatchError reports whether err is a batchError.
func isBatchError(err error) bool {
	var be batchError
	return errors.As(err, &be)
}

// endSavepoint ends a transactional handler's savepoint after the handler returned handled: released
// when it succeeded, rolled back when it failed. Both use work, not the handler's context: a handler that
// returns just before its timeout must not have its release refused (pgx then closes the savepoint
// without sending it, and its writes would stay beside what comes next). When the savepoint cannot be
// ended, the transaction cannot be trusted: a batchError.
func endSavepoint(work context.Context, sp pgx.Tx, handled error) error {
	if handled != nil {
		if err := sp.Rollback(work); err != nil {
			return batchError{fmt.Errorf("%w (and rolling back its writes failed: %v)", handled, err)}
		}
		return handled
	}
	if err := sp.Commit(work); err != nil {
		return batchError{fmt.Errorf("release savepoint: %w", err)}
	}
	return nil
}

// checkpoint flushes the handler and commits pos, keeping the lock. It reports false when the lock
// was lost to another instance, or held by an operator's action, in the instant between commit and
// relock. last says that it ends the batch: the poll of the transactions in flight then travels with the
// relock, for the next batch.
func (p *Processor[T]) checkpoint(work context.Context, pos inordertype.Position, handled int, flying store.InFlight, last bool) (bool, error) {
	c := p.prepareCheckpoint(work, pos, handled, last)
	if c.err == nil {
		c.ok, c.err = p.cur.Lock.Checkpoint(work, pos, handled, flying)
	}
	return c.finish()
}

// sentCheckpoint is a checkpoint on its way (see sendCheckpoint): done closes when the database answered,
// and finish then returns what checkpoint returns.
type sentCheckpoint struct {
	done   chan struct{}
	ok     bool
	err    error
	finish func() (bool, error)
}

// sendCheckpoint is checkpoint without the wait for the database's answer, so that a keyed window goes on
// taking the results of its handler calls, and starting what the durable position allows, during the
// commit's round trip. The commit runs on a goroutine of its own: nothing else may use the cursor
// repository until done closes. What follows the answer (the observer, a lost lock) is done by finish,
// on the caller's goroutine.
func (p *Processor[T]) sendCheckpoint(work context.Context, pos inordertype.Position, handled int, flying store.InFlight, last bool) *sentCheckpoint {
	c := p.prepareCheckpoint(work, pos, handled, last)
	if c.err != nil {
		close(c.done)
		return c
	}
	go func() {
		defer close(c.done)
		c.ok, c.err = p.cur.Lock.Checkpoint(work, pos, handled, flying)
	}()
	return c
}

// prepareCheckpoint flushes the handler and begins the commit's span, for checkpoint or sendCheckpoint.
func (p *Processor[T]) prepareCheckpoint(work context.Context, pos inordertype.Position, handled int, last bool) *sentCheckpoint {
	c := &sentCheckpoint{done: make(chan struct{})}
	if c.err = p.exec.flush(work); c.err != nil {
		c.finish = func() (bool, error) { return false, c.err }
		return c
	}
	if last && !p.cur.Session.Contended() {
		// Unless other processes wait for the Client's connections: the batch then ends its transaction
		// (see tick), and the poll would be thrown away with the relock.
		p.cur.Lock.RideNext()
	}
	end := p.tracing.startCommit(work, handled)
	c.finish = func() (bool, error) {
		end(c.err)
		if c.err == nil {
			p.obs.Position(p.cfg.Process, pos.CreatedAt)
		}
		if c.err == nil && !c.ok {
			p.relockMissed()
		}
		return c.ok, c.err
	}
	return c
}

// relockMissed follows a commit after which the row could not be locked again: either another instance
// took the process (its lease had run out), or the row is held for a moment (an operator's action, or a
// standby looking at it) while this instance still owns the process, which is worth no line.
func (p *Processor[T]) relockMissed() {
	if p.cur.Lease.Owner() {
		p.last.rowBusy = true
		return
	}
	p.log.Info().Str("owner", p.cur.Lease.Holder()).Msg("cursor taken by another instance between batches; standing by")
	p.role = roleNone
	p.obs.Locked(p.cfg.Process, false)
}

// leaseMargin is what an owner keeps of its lease unused: a record starts only while the lease covers
// its handler call and this much more.
func leaseMargin(lease time.Duration) time.Duration { return min(time.Second, lease/10) }

// covered makes sure that this instance's lease covers one more handler call before the next record of
// the batch starts. When a third of the lease has passed, or what is left would not cover the call, it
// renews the lease by committing what the batch has delivered so far (the row is locked again in the same
// round trip). It reports false when the batch must end here: the renewal failed (o.err), the row went
// to another instance (o.lost), or it is held for a moment (o.lost: the next batch looks again).
func (p *Processor[T]) covered(work context.Context, o *outcome[T], flying store.InFlight) bool {
	if p.exec.leaseCovers(time.Now()) {
		return true
	}
	p.rd.joinAhead()
	var ok bool
	var err error
	if o.last != (inordertype.Position{}) && o.n > o.counted {
		ok, err = p.checkpoint(work, o.last, o.n-o.counted, flying, false)
		o.counted = o.n
	} else {
		ok, err = p.commit(work, 0)
		if err == nil && !ok && p.cur.Lease.Owner() {
			p.last.rowBusy = true
		}
	}
	if !o.checkpointed(ok, err) {
		return false
	}
	if left := p.cur.Lease.LeaseLeft(); left < p.cfg.HandlerTimeout+leaseMargin(p.cfg.Lease) {
		// Renewed, and still short: the database answers too slowly for the lease. End the batch rather
		// than start a record the lease may not cover.
		o.err = fmt.Errorf("the lease (%s) would not cover the next handler call (%s) after renewing it: "+
			"%s left", p.cfg.Lease, p.cfg.HandlerTimeout, left.Round(time.Millisecond))
		return false
	}
	return true
}

// flush flushes what the handler buffered (handlers.Flusher), before a commit makes the position durable.
func (e *executor[T]) flush(work context.Context) error {
	if e.flusher == nil {
		return nil
	}
	if err := e.flusher.Flush(work); err != nil {
		return fmt.Errorf("flush handler: %w", err)
	}
	return nil
}

// finish ends a batch that went through (or stopped early without a failure): with per-batch
// checkpoints, the position, if it moved, is committed with the count of records handled, and the row is
// locked again for the next batch in the same round trip. It reports whether the batch ended so, its
// transaction going on into the next batch; otherwise the batch's transaction is Unlocked as always.
func (p *Processor[T]) finish(work context.Context, from inordertype.Position, o outcome[T]) (bool, error) {
	if !p.cur.Lock.Locked() {
		return false, nil
	}
	if o.last == from || p.cfg.Checkpoint == CheckpointRecord {
		// With record checkpoints every advance is durable already, and the last one locked the row again
		// for the next batch.
		return o.n > 0 && o.counted == o.n, nil
	}
	return p.checkpoint(work, o.last, o.n-o.counted, store.InFlight{}, true)
}

// fail writes the completion of it, the record the batch that began at st failed on, as the executor
// builds it from its fate f (see executor.complete), with the position of the last success before it, and
// returns how long to wait before trying it again.
func (p *Processor[T]) fail(work context.Context, st inordertype.State, last inordertype.Position, it *item[T], f fate) (time.Duration, error) {
	rec, cause, check := &it.rec, f.v.err, f.v.unavailable
	c := p.exec.complete(st, it, f)
	if err := p.exec.flush(work); err != nil {
		// What the handler buffered is not safe: drop every advance since the last durable position.
		p.log.Error().Err(err).Msg("flush failed; the batch will be delivered again")
		p.abort(work)
		return p.exec.retryDelay(1, verdict{}), nil
	}
	h, err := p.cur.Position.RecordFailure(work, last, c.failure)
	if err == nil && c.park {
		// The cursor row counts it halted now, no longer the sink's outage: the key parks, and the stream
		// goes on at once.
		// The position moves past it, in the transaction committed here.
		if err = p.park(work, st, it, f.v); err == nil {
			err = p.cur.Position.SetPosition(work, it.pos, 0)
		}
		if err == nil {
			if err = p.cur.Lock.Unlock(work); err == nil {
				return 0, nil
			}
		}
	}
	if err != nil {
		p.log.Error().Err(err).Str("record", rec.ID).AnErr("handler_error", cause).Msg("could not record the halt state")
		p.abort(work)
		if p.cur.Session.Broken(err) {
			return c.failure.RetryIn, err // a lost connection: the loop reconnects, in a new tenure
		}
		return c.failure.RetryIn, nil // the wait decided with the rest, though nothing of it could be written
	}
	if err := p.cur.Lock.Unlock(work); err != nil {
		p.log.Error().Err(err).Msg("could not commit the halt state")
		if p.cur.Session.Broken(err) {
			// The connection was lost with the commit: the loop reconnects, in a new tenure, as for a
			// connection lost anywhere else (what was accepted ahead goes out again, see attempts).
			return 0, err
		}
	}
	// The wait runs from the failure to the next attempt, both stamped by the statement that wrote them:
	// the database's clock alone (see store.Position.RecordFailure), whatever this machine's says.
	wait := h.NextAttemptAt.Sub(h.LastFailureAt)
	p.failing.nextAt = h.NextAttemptAt
	was := p.failing.note(&h)
	event := "retrying"
	switch p.failing.told {
	case failHalted:
		event = "halted"
	case failUnavailable:
		event = "sink unavailable"
	}
	endSpan(&p.tracing, work, it, event, attribute.Int("inorder.record.attempts", h.Attempts), attribute.Bool("inorder.record.permanent", h.Permanent),
		attribute.String("inorder.record.next_attempt_at", h.NextAttemptAt.UTC().Format(time.RFC3339Nano)))
	// One line per change of state: retrying begins (a warning), the stream halts (an error: refused for
	// good, or failing for longer than HaltAfter). Every attempt in between is a debug line.
	ev := p.log.Debug()
	msg := "handler failed again; retrying the record"
	switch {
	case p.failing.told == failUnavailable && was != failUnavailable:
		ev, msg = p.log.Warn().Str("check", check), "the sink is unavailable: it refuses what every record would meet, "+
			"so nothing is halted or parked for it; waiting and retrying with backoff until it accepts"
	case p.failing.told == failHalted && was != failHalted && h.Permanent:
		ev, msg = p.log.Error(), "the sink refused the record; stream halted on it until it goes through or an operator skips it"
	case p.failing.told == failHalted && was != failHalted:
		ev, msg = p.log.Error(), "the record has failed for longer than the halt-after threshold; stream halted on it until it goes through or an operator skips it"
	case p.failing.told == failRetrying && was != failRetrying:
		ev, msg = p.log.Warn(), "handler failed; retrying the record with backoff (the stream waits on it)"
	}
	ev.Str("record", rec.ID).Int("attempts", h.Attempts).Bool("permanent", h.Permanent).Int("status", h.Status).
		Time("failing_since", h.FirstFailureAt).Err(cause).Str("retry_in", wait.Round(time.Millisecond).String()).Msg(msg)
	return p.wt.rowWatched(wait), nil
}

// PanicError is the failure of a record whose handler panicked: the panic's value, which the cursor row
// keeps as the error, and the stack, which goes to the log (once per panic) for whoever debugs it.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// panicked turns a recovered panic of rec's handler into its failure, and logs where it happened.
func (e *executor[T]) panicked(rec *handlers.Record[T], v any) error {
	pe := &PanicError{Value: v, Stack: debug.Stack()}
	e.log.Error().Str("record", rec.ID).Str("panic", fmt.Sprint(v)).Str("stack", string(pe.Stack)).
		Msg("the handler panicked; the record counts as failed")
	return pe
}
