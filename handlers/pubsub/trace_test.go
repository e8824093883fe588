package pubsub_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/traceparent"
)

func TestTraceContextTravelsInAttributes(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic := f.topic(t, "traced")
	d := newDB(t, "outbox", outboxDDL+`; ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text`)
	ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "POST /bookings")
	parent, state := traceparent.FromContext(ctx)
	span.End()
	ids := d.insert(t, `INSERT INTO outbox (aggregate_id, type, payload, traceparent, tracestate)
		VALUES ('booking-7', 'booking.created', '{}', $1, $2) RETURNING id`, parent, state)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := newHandler(t, pubsub.Config{Client: f.client, Topic: topic})
	stop := runWith(t, d, "traced", "outbox", h, func(c *processor.Config[handlers.Row]) { c.TracerProvider = tp })
	eventually(t, "the message", func() bool { return len(f.messages(topic)) == 1 })
	var send sdktrace.ReadOnlySpan
	eventually(t, "the publish's span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "send "+topic {
				send = s
			}
		}
		return send != nil
	})
	require.NoError(t, stop())

	// The subscriber's side, with OpenTelemetry's own propagator.
	m := f.messages(topic)[0]
	require.Equal(t, ids[0], m.Attributes[handlers.HeaderID])
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(m.Attributes)))
	require.True(t, got.IsValid(), "the message carries a traceparent attribute: %v", m.Attributes)
	require.Equal(t, span.SpanContext().TraceID(), got.TraceID(), "the application's trace reaches the subscriber")
	require.Equal(t, send.SpanContext().SpanID(), got.SpanID(), "the subscriber's parent is the publish's span")
	require.Equal(t, trace.SpanKindProducer, send.SpanKind())
	var deliver sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().SpanID() == send.Parent().SpanID() {
			deliver = s
		}
	}
	require.NotNil(t, deliver, "the delivery's span is the publish's parent")
	require.Equal(t, span.SpanContext().SpanID(), deliver.Parent().SpanID())
}
