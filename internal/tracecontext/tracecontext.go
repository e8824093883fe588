// Package tracecontext is where inorder reads and writes W3C trace context, the one place that knows its
// format: an application's span written into the outbox row (Columns, for package traceparent), read back
// from the row when the record is delivered (Extract, for the processor's delivery span), and carried on
// to the sink's receiver in a header or attribute (Start, Inject and End, for the sinks).
package tracecontext

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Columns returns the traceparent and tracestate of the span in ctx, as W3C Trace Context headers write
// them, for a row's trace columns: both nil when ctx carries no valid span, tracestate nil too when the
// span has no trace state (pointers, so that pgx writes NULL for nil).
func Columns(ctx context.Context) (parent, state *string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, nil
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	if p, ok := c["traceparent"]; ok {
		parent = &p
	}
	if s, ok := c["tracestate"]; ok && s != "" {
		state = &s
	}
	return parent, state
}

// Extract returns ctx with the trace context an application wrote with a row (its traceparent and
// tracestate columns) as the remote span context, read as W3C whatever propagator the application set
// globally. It is ctx unchanged when parent is not a valid traceparent.
func Extract(ctx context.Context, parent, state string) context.Context {
	return w3c.Extract(ctx, row{parent: parent, state: state})
}

// row is a row's trace columns, read as a propagation carrier.
type row struct{ parent, state string }

func (c row) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (row) Set(string, string) {}
func (row) Keys() []string     { return []string{"traceparent", "tracestate"} }

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
