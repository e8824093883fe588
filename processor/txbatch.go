package processor

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// deliverTxBatch hands a whole batch to a handlers.TxBatchHandler in one call, in a savepoint of the cursor
// transaction, and moves the position past all of it: the read model and the position commit together,
// once per batch whatever the checkpoint setting. A batch that holds the failing record of a retrying or
// halted stream, or a record of a parked key, and a batch whose call fails, go one record at a time
// instead (deliverSync), which finds the record that fails and keeps what went before it.
func (p *Processor[T]) deliverTxBatch(ctx, work context.Context, st inordertype.State, items []item[T]) outcome[T] {
	if ctx.Err() != nil {
		return outcome[T]{last: st.Position}
	}
	if o := (outcome[T]{last: st.Position}); !p.covered(work, &o, store.InFlight{}) {
		return o
	}
	recs := make([]*handlers.Record[T], len(items))
	for i := range items {
		it := &items[i]
		it.rec.Attempt = attemptOf(st, it.rec.ID)
		if it.rec.Attempt > 1 || p.parked.has(it.rec.Key) {
			return p.deliverSync(ctx, work, st, items)
		}
		recs[i] = &it.rec
	}
	start := time.Now()
	for i := range items {
		startAttempt(&p.tracing, work, &items[i])
	}
	hctx := work
	if b := p.tracing.batch; b != nil {
		hctx = trace.ContextWithSpan(work, b)
	}
	err := p.exec.handleTxBatch(hctx, p.txBatch, recs)
	took := time.Since(start) / time.Duration(len(recs))
	for i := range items {
		endAttempt(&items[i], err) // a failed batch's spans are closed by its fate below, or by the tick
	}
	if err != nil {
		// Not told to the observer: the records are counted as they go one at a time. The batch's fate is
		// decided as one record's, with the error alone (see fate.go).
		switch decideFate(fateInput{err: err, cutOff: cutOff(ctx, work)}).kind {
		case fateAbort:
			return outcome[T]{last: st.Position, err: err}
		case fateCutOff:
			return outcome[T]{last: st.Position}
		}
		p.log.Debug().Err(err).Int("records", len(recs)).Msg("the batch failed; delivering it one record at a time")
		for i := range items {
			endSpan(&p.tracing, work, &items[i], "delivered one at a time")
		}
		return p.deliverSync(ctx, work, st, items)
	}
	for range recs {
		p.obs.Handled(p.cfg.Process, took, nil)
	}
	o := outcome[T]{last: items[len(items)-1].pos, n: len(items)}
	if p.cfg.Checkpoint == CheckpointRecord {
		o.counted = o.n
		o.checkpointed(p.checkpoint(work, o.last, o.n, store.InFlight{}, true))
	}
	return o
}

// handleTxBatch runs HandleTxBatch in a savepoint, under one handler timeout, and rolls the savepoint back
// when it fails or panics, so that nothing of the batch stays for the records delivered one at a time.
func (e *executor[T]) handleTxBatch(work context.Context, h handlers.TxBatchHandler[T], recs []*handlers.Record[T]) error {
	call := e.deadline.start(work, e.callLimit())
	defer call.end()
	return e.inSavepoint(call, work, recs[0], func(tx pgx.Tx) error { return h.HandleTxBatch(call, tx, recs) })
}
