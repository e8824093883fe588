package processor

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// executor runs the handler on a record and turns what it answered into what becomes of it: the
// record's fate (decideFate), and, for the record a batch fails on, its completion, the one value the
// store writes (store.Position.RecordFailure) as it is. Whatever delivers the record (one at a time,
// the keyed window, an AsyncHandler), the verdict, the attempts counted and the wait before the next
// attempt are decided here, once; the store counts nothing again and judges nothing again.
type executor[T any] struct {
	// handler or txHandler is the handler it runs (Config.Handler or TxHandler, one of them), each call
	// bounded by deadline (timeout: Config.HandlerTimeout), and by the lease and the idle-in-transaction
	// timeout (lease, idle: Config.Lease and IdleInTransactionTimeout, see callLimit and leaseCovers).
	handler              handlers.Handler[T]
	txHandler            handlers.TxHandler[T]
	flusher              handlers.Flusher // the handler, when it buffers what it is handed (see flush)
	deadline             *handlerDeadline
	timeout, lease, idle time.Duration
	// cur is the processor's cursor repository, set when it opens: the cursor transaction a TxHandler
	// writes in, the lease a call must end within, and the database's clock (Lease.Now), by which a
	// record's failures are timed, since the cursor row's times are the database's.
	cur *store.Repository
	// tracing is the processor's, which gives each attempt its span.
	tracing *tracing
	log     zerolog.Logger
	// refusals tells a sink's outage from records' refusals across keys (see outage.go): the handler's
	// answers are noted there, and the keys to redrive once an outage ends are taken from there.
	refusals refusals
	// parking says that the stream parks keys (OnHaltPark).
	parking bool
	// haltAfter is Config.HaltAfter; retryMin and retryMax are Config.RetryMin and RetryMax.
	haltAfter, retryMin, retryMax time.Duration
	// attempts is what it knows of the attempt numbers beyond the cursor row's (see attempts.go).
	attempts attempts
	// obs is the processor's observer, told of every handler call and of records sent again
	// (ResentObserver), and process the name it is told.
	obs     Observer
	process string
}

// newExecutor returns the executor of a processor configured by cfg (its defaults set), which logs to log,
// tells obs, and traces with t; its cursor repository is set when it opens.
func newExecutor[T any](cfg *Config[T], log zerolog.Logger, obs Observer, t *tracing) executor[T] {
	h := any(cfg.Handler)
	if h == nil {
		h = cfg.TxHandler
	}
	flusher, _ := h.(handlers.Flusher)
	return executor[T]{handler: cfg.Handler, txHandler: cfg.TxHandler, flusher: flusher,
		deadline: &handlerDeadline{timeout: cfg.HandlerTimeout}, timeout: cfg.HandlerTimeout, lease: cfg.Lease,
		idle:    cfg.IdleInTransactionTimeout,
		tracing: t, log: log, parking: cfg.OnHalt == OnHaltPark, haltAfter: cfg.HaltAfter,
		retryMin: cfg.RetryMin, retryMax: cfg.RetryMax, obs: obs, process: cfg.Process}
}

// fateOf decides the fate of it, from a batch that began at st, whose handler returned err (behind: not
// handed to the handler, its key parked). A key that parks is noted among the refusals now, not when its
// row is stored: another key's refusal may show the sink's outage before then, and the key is to be
// redriven when the outage ends (see outage.go).
func (e *executor[T]) fateOf(ctx, work context.Context, st inordertype.State, it *item[T], err error, behind bool) fate {
	in := fateInput{err: err, behind: behind, id: it.rec.ID, key: it.rec.Key, halt: st.Halt,
		parking: e.parking, haltAfter: e.haltAfter}
	if err != nil && !behind {
		// The clock only for a failure: a record that went through, or parks behind its key, has its fate
		// without it (a read of the clock per record shows in the profile of a backlog).
		in.now = e.cur.Lease.Now()
		in.cutOff, in.sinkCheck = cutOff(ctx, work), e.sinkCheck(err)
	}
	f := decideFate(in)
	if f.kind == fatePark {
		e.refusals.parked(it.rec.Key)
	}
	return f
}

// sinkCheck says what to check when cause is the sink's outage: by the sink's own word
// (handlers.Unavailable), or because records of different keys met the same refusal.
func (e *executor[T]) sinkCheck(cause error) string {
	if check := unavailable(cause); check != "" {
		return check
	}
	return e.refusals.check(cause)
}

// leaseCovers reports that at now the lease covers one more handler call without a renewal: less than a
// third of it has passed, and what is left covers the call (see covered).
func (e *executor[T]) leaseCovers(now time.Time) bool {
	until := e.coveredUntil()
	return !until.IsZero() && !now.After(until)
}

// coveredUntil is until when the lease covers one more handler call without a renewal (see leaseCovers);
// zero when no lease runs.
func (e *executor[T]) coveredUntil() time.Time {
	until := e.cur.Lease.LeaseUntil()
	if until.IsZero() {
		return time.Time{}
	}
	return until.Add(-max(e.timeout+leaseMargin(e.lease), e.lease*2/3))
}

// completion is what becomes of the record a batch failed on, complete and decided once: the value the
// store writes into the cursor row (failure), and whether the record's key then parks on it (park: a
// refusal after the sink's outage halts first and then parks, see decideFate). It is a value: what is
// handed to the store is not changed after.
type completion struct {
	failure store.Failure
	park    bool
}

// complete builds the completion of it, the record the batch that began at st failed on, as its fate f
// (retrying, halted, or the sink's outage) decided it. The attempts count on from the cursor row's when
// it names the same record (attemptOf); the next attempt is the backoff after them, on the database's
// clock (see store.Failure.RetryIn). The sink's outage is no record's fault: it neither halts the stream
// nor counts as a refusal for good, whatever the sink answered.
func (e *executor[T]) complete(st inordertype.State, it *item[T], f fate) completion {
	attempts := attemptOf(st, it.rec.ID)
	outage := f.kind == fateUnavailable
	return completion{
		failure: store.Failure{
			RecordID:    it.rec.ID,
			Error:       store.ClipError(f.v.err.Error()),
			Attempts:    attempts,
			Permanent:   f.v.permanent && !outage,
			Status:      f.v.status,
			RetryIn:     e.retryDelay(attempts, f.v),
			Halt:        f.kind == fateHalt,
			Unavailable: f.v.unavailable,
		},
		park: f.parkOnceHalted,
	}
}

// retryDelay is how long to wait before the next attempt of a record failing as v says, after attempts
// failed: a refusal for good waits RetryMax, anything else backs off, at least as long as the sink asked.
func (e *executor[T]) retryDelay(attempts int, v verdict) time.Duration {
	if v.permanent && v.unavailable == "" {
		return e.retryMax
	}
	d := backoff(attempts, e.retryMin, e.retryMax)
	if v.retryAfter > d {
		d = min(v.retryAfter, e.retryMax)
	}
	return d
}
