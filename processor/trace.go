package processor

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// tracerName is the instrumentation scope of the processor's spans.
const tracerName = "github.com/inorder-dev/inorder/processor"

// traceContext is the W3C trace context an application wrote with a row: its traceparent and tracestate
// columns, read by package tracecontext.
type traceContext struct{ parent, state string }

// tracing is the processor's tracer and the span of the batch under way.
type tracing struct {
	tracer trace.Tracer
	// batch is the span of the batch under way (nil between batches): the parent of the read and commit
	// spans and of deliveries whose row carries no trace context, and a link from the others.
	batch trace.Span
	// attrs are the attributes every delivery span of the process carries: the three operation
	// attributes, then the source table, the consumer group and the process (a batch's span carries these).
	attrs []attribute.KeyValue
	// deliverName is the delivery spans' name, made once.
	deliverName string
	// recording says whether the provider recorded the batch under way: when it did not (no provider
	// set, or a sampler left it out), a record without a trace context costs no span at all.
	recording bool
	// process names the spans, and synchronous says that a commit waits for the WAL's flush
	// (Config.SynchronousCommit, or a TxHandler).
	process     string
	synchronous bool
}

func newTracing(tp trace.TracerProvider, process string, synchronous bool, table *source.Table) tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tracing{
		tracer:      tp.Tracer(tracerName),
		process:     process,
		synchronous: synchronous,
		deliverName: "deliver " + process,
		attrs: []attribute.KeyValue{
			attribute.String("messaging.system", "inorder"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "deliver"),
			attribute.String("messaging.destination.name", table.Qualified),
			attribute.String("messaging.consumer.group.name", process),
			attribute.String("inorder.process", process),
		},
	}
}

// startBatch starts the span of a batch that read n records, after the fact: it began at began (before
// the lock), its horizon was asked at horizonAt and its read at readAt. A poll that reads nothing makes no
// span, so an idle stream sends none.
func (t *tracing) startBatch(began, horizonAt, readAt time.Time, n int) {
	ctx, batch := t.tracer.Start(context.Background(), "batch "+t.process, trace.WithTimestamp(began))
	if t.recording = batch.IsRecording(); !t.recording {
		return
	}
	batch.SetAttributes(t.attrs[3:]...) // the source table, the consumer group and the process
	batch.SetAttributes(attribute.Int("messaging.batch.message_count", n))
	t.batch = batch
	_, h := t.tracer.Start(ctx, "horizon "+t.process, trace.WithTimestamp(horizonAt))
	h.End(trace.WithTimestamp(readAt))
	_, r := t.tracer.Start(ctx, "read "+t.process, trace.WithTimestamp(readAt),
		trace.WithAttributes(attribute.Int("messaging.batch.message_count", n)))
	r.End()
}

// endBatch ends the batch's span; err is what ended the batch, if anything failed.
func (t *tracing) endBatch(delivered int, err error) {
	b := t.batch
	if b == nil {
		return
	}
	t.batch = nil
	b.SetAttributes(attribute.Int("inorder.batch.delivered", delivered))
	if err != nil {
		b.SetStatus(codes.Error, err.Error())
	}
	b.End()
}

// startCommit starts the span of a position's commit, a child of the batch's, and returns what ends it
// with the commit's error. Outside a traced batch it starts nothing.
func (t *tracing) startCommit(work context.Context, records int) func(error) {
	if t.batch == nil {
		return func(error) {}
	}
	_, s := t.tracer.Start(trace.ContextWithSpan(work, t.batch), "commit "+t.process,
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.Int("inorder.commit.records", records),
			attribute.Bool("inorder.commit.synchronous", t.synchronous)))
	return func(err error) {
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
}

// startAttempt starts the span of one delivery attempt of it and returns the handler's context, which
// carries it (sinks propagate it: webhook headers, Kafka headers, Pub/Sub attributes). The span is a child
// of the application's span that wrote the row, read from its trace columns, and links to it as the
// messaging conventions ask of a message's creation context; a row without one is delivered as a child
// of the batch's span, as t, the processor's tracing, has it. The span stays open until endAttempt or a
// fate (halted, parked) closes it.
func startAttempt[T any](t *tracing, ctx context.Context, it *item[T]) context.Context {
	if it.tr == nil {
		if !t.recording {
			// No trace context and a batch not recorded (no provider, or a sampler that left the batch
			// out, which a parent-based one would do to its children too): no span, no cost.
			return ctx
		}
		it.tr = &itemTrace{}
	}
	// A row with a trace context gets its span whatever became of the batch's: the sampler decides from
	// the application's span, and without a provider the span carries the row's context on to the sinks.
	parent := ctx
	var links []trace.Link
	if it.tr.parent != "" {
		parent = tracecontext.Extract(ctx, it.tr.parent, it.tr.state)
		if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		} else {
			parent = ctx // an unreadable traceparent: traced as a row without one
		}
	}
	if b := t.batch; b != nil {
		if len(links) == 0 {
			parent = trace.ContextWithSpan(parent, b)
		} else {
			links = append(links, trace.Link{SpanContext: b.SpanContext()})
		}
	}
	// One slice of attributes, given at the start (samplers see them, and the SDK copies them once).
	attrs := make([]attribute.KeyValue, len(t.attrs), len(t.attrs)+4)
	copy(attrs, t.attrs)
	attrs = append(attrs, attribute.String("messaging.message.id", it.rec.ID),
		attribute.Int("inorder.record.attempt", it.rec.Attempt),
		attribute.String("inorder.record.created_at", it.rec.CreatedAt.Format(time.RFC3339Nano)))
	if it.rec.Key != "" {
		attrs = append(attrs, attribute.String("inorder.record.key", it.rec.Key))
	}
	hctx, span := t.tracer.Start(parent, t.deliverName,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	it.tr.span = span
	return hctx
}

// endAttempt closes a delivery attempt's span when it succeeded; a failed attempt's span gets the error
// and stays open for its fate (see fate).
func endAttempt[T any](it *item[T], err error) {
	s := it.span()
	if s == nil {
		return
	}
	if err == nil {
		s.End()
		it.tr.span = nil
		return
	}
	s.RecordError(err)
	s.SetStatus(codes.Error, err.Error())
}

// span is the record's open attempt span, or nil.
func (it *item[T]) span() trace.Span {
	if it.tr == nil {
		return nil
	}
	return it.tr.span
}

// endSpan closes a record's span with what became of it: "halted" (the stream waits on it), "retrying",
// "parked" (its key waits behind it). A record parked behind its key without a handler call gets a span of
// its own for it, so that the application's trace shows where its record went.
func endSpan[T any](t *tracing, ctx context.Context, it *item[T], event string, attrs ...attribute.KeyValue) {
	if it.span() == nil {
		if startAttempt(t, ctx, it); it.span() == nil {
			return // nothing is recorded
		}
	}
	it.tr.span.AddEvent(event, trace.WithAttributes(attrs...))
	it.tr.span.End()
	it.tr.span = nil
}

// closeSpans ends the spans of a batch's records whose outcome was not counted (cut off at shutdown,
// delivered again after a failure before them).
func closeSpans[T any](items []item[T]) {
	for i := range items {
		if s := items[i].span(); s != nil {
			s.End()
			items[i].tr.span = nil
		}
	}
}

// operator records an operator's move of the position (a skip or a rewind) as a span of its own,
// with the event named after it.
func (t *tracing) operator(from, to inordertype.Position) {
	event := "rewound"
	if after(to, from) {
		event = "skipped"
	}
	_, s := t.tracer.Start(context.Background(), "operator "+t.process, trace.WithAttributes(attribute.String("inorder.process", t.process)))
	s.AddEvent(event, trace.WithAttributes(attribute.String("inorder.position.from", from.String()),
		attribute.String("inorder.position.to", to.String())))
	s.End()
}

// after reports whether position a lies after b in (created_at, id) order: ids compare as numbers when
// both are integers, else as text (uuid's text form sorts as uuids do).
func after(a, b inordertype.Position) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	x, errX := strconv.ParseInt(a.ID, 10, 64)
	y, errY := strconv.ParseInt(b.ID, 10, 64)
	if errX == nil && errY == nil {
		return x > y
	}
	return a.ID > b.ID
}
