// Package traceparent gives an application the W3C trace context of its current span, to write into the
// outbox row with the business change, in the same transaction. inorder reads it back from the row (the
// traceparent and tracestate columns, or those processor.Source names) and traces each delivery of the
// record as a continuation of that span: the request that wrote the row and the call that delivered it
// end up in one trace, and the sink's receiver, which gets the context in a header or attribute, in it
// too.
//
// A table takes the context in two nullable text columns:
//
//	ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text;
//
// A row written outside any span has NULL in both, and its deliveries start traces of their own.
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
