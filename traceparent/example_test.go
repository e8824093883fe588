package traceparent_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/inorder-dev/inorder/traceparent"
)

// placeBooking is a request handler's write: the booking and its outbox row, with the trace context of
// the request, in one transaction.
func placeBooking(ctx context.Context, tx pgx.Tx, customer string, seats int) error {
	parent, state := traceparent.FromContext(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO bookings (customer_id, seats) VALUES ($1, $2)`, customer, seats); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_id, type, payload, traceparent, tracestate)
		VALUES ($1, 'booking.placed', jsonb_build_object('seats', $2::int), $3, $4)`, customer, seats, parent, state)
	return err
}

func ExampleFromContext() {
	_ = placeBooking // the write above, run inside a request's span

	ctx, span := sdktrace.NewTracerProvider().Tracer("shop").Start(context.Background(), "POST /bookings")
	defer span.End()
	parent, state := traceparent.FromContext(ctx)
	fmt.Println(len(*parent), *parent == "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", state == nil)

	outside, _ := traceparent.FromContext(context.Background())
	fmt.Println(outside == nil)
	// Output:
	// 55 true true
	// true
}
