package traceparent

import (
	"context"

	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// FromContext returns the traceparent and tracestate of the span in ctx, as W3C Trace Context headers
// write them, for the row's trace columns. Both are nil when ctx carries no valid span (no tracing set
// up, or outside a traced request), so that the columns get NULL; tracestate is nil too when the span has
// no trace state. They are pointers so that pgx writes NULL for nil.
func FromContext(ctx context.Context) (parent, state *string) { return tracecontext.Columns(ctx) }
