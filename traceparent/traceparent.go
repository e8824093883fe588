package traceparent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// FromContext returns the traceparent and tracestate of the span in ctx, as W3C Trace Context headers
// write them, for the row's trace columns. Both are nil when ctx carries no valid span (no tracing set
// up, or outside a traced request), so that the columns get NULL; tracestate is nil too when the span has
// no trace state. They are pointers so that pgx writes NULL for nil.
func FromContext(ctx context.Context) (parent, state *string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	if p, ok := c["traceparent"]; ok {
		parent = &p
	}
	if s, ok := c["tracestate"]; ok && s != "" {
		state = &s
	}
	return parent, state
}
