package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/traceparent"
)

// headerCarrier reads a consumed record's headers for OpenTelemetry's propagator.
type headerCarrier map[string]string

func (c headerCarrier) Get(k string) string { return c[k] }
func (c headerCarrier) Set(k, v string)     { c[k] = v }
func (c headerCarrier) Keys() []string {
	var ks []string
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

func TestTraceContextTravelsInHeaders(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{true, false} {
		name := map[bool]string{true: "traced", false: "untraced relay"}[traced]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.DB.Exec(t, `ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text`)
			ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "POST /bookings")
			parent, state := traceparent.FromContext(ctx)
			span.End()
			ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload, traceparent, tracestate)
				VALUES ('booking-7', 'booking.created', '{}', $1, $2) RETURNING id`, parent, state)

			rec := tracetest.NewSpanRecorder()
			o := sinktest.RunOpts{}
			if traced {
				o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			}
			b.Run(t, "traced", b.newHandler(t, kafka.Config{Topic: "bookings"}), o)
			r := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)[0]

			// The consumer's side, with OpenTelemetry's own propagator.
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier(headers(r))))
			require.True(t, got.IsValid(), "the record carries a traceparent header: %v", headers(r))
			require.Equal(t, span.SpanContext().TraceID(), got.TraceID(), "the application's trace reaches the consumer")
			if !traced {
				// Without a tracer provider inorder records nothing, and passes the application's context on.
				require.Equal(t, span.SpanContext().SpanID(), got.SpanID())
				return
			}
			var send sdktrace.ReadOnlySpan
			require.Eventually(t, func() bool { // ended once the produce is acknowledged, after the consumer may see it
				for _, s := range rec.Ended() {
					if s.Name() == "send bookings" {
						send = s
					}
				}
				return send != nil
			}, 10*time.Second, 5*time.Millisecond, "the produce has a span")
			require.Equal(t, send.SpanContext().SpanID(), got.SpanID(), "the consumer's parent is the produce's span")
			require.Equal(t, trace.SpanKindProducer, send.SpanKind())
			var deliver sdktrace.ReadOnlySpan
			require.Eventually(t, func() bool { // ended just after the produce's
				for _, s := range rec.Ended() {
					if s.SpanContext().SpanID() == send.Parent().SpanID() {
						deliver = s
					}
				}
				return deliver != nil
			}, 10*time.Second, 5*time.Millisecond, "the delivery's span is the produce's parent")
			require.Equal(t, "deliver traced", deliver.Name())
			require.Equal(t, span.SpanContext().SpanID(), deliver.Parent().SpanID())
		})
	}
}
