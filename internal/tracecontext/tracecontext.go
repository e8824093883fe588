// Package tracecontext carries a delivery's trace to a sink: the span a sink makes of its call, a child
// of the delivery attempt's, and the W3C trace context it sends with the message.
package tracecontext

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3c is what every sink sends, whatever the application set as its global propagator (which is a no-op
// until it sets one): receivers that read traceparent find it.
var w3c propagation.TraceContext

// Start starts a sink's span for its call, a child of the delivery attempt's span in ctx, with the
// provider that made that span: no provider of its own to configure, and nothing recorded when the
// attempt is not. The caller sets the attributes when the span is recording, so that an untraced stream
// builds none.
func Start(ctx context.Context, scope, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	return parent.TracerProvider().Tracer(scope).Start(ctx, name, trace.WithSpanKind(kind))
}

// Inject writes ctx's trace context into carrier: W3C traceparent and tracestate, then whatever else the
// global propagator adds (baggage, say). It writes nothing when ctx carries no valid span context.
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	w3c.Inject(ctx, carrier)
	otel.GetTextMapPropagator().Inject(ctx, carrier)
}

// End ends a sink's span, with err as its error status when the call failed.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
