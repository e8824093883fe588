package rabbitmq_test

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

// Example relays an outbox to the exchange "bookings" of the broker at $RABBITMQ_URL, each record a
// persistent message with the aggregate as routing key, eight aggregates at once. A direct exchange with
// a queue per aggregate, or a topic exchange into one single-active-consumer queue, keeps each
// aggregate's records in order for its consumer. The example is compiled, not run: it needs a broker.
func Example() {
	ctx := context.Background()
	h, err := rabbitmq.New(rabbitmq.Config{URL: os.Getenv("RABBITMQ_URL"), Exchange: "bookings"})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	if err := h.CheckExchange(ctx); err != nil { // a missing exchange stops the start here
		log.Fatal(err)
	}

	// One record by hand: Handle returns once the broker confirmed it.
	err = h.Handle(ctx, &handlers.Record[handlers.Row]{
		Process: "bookings_outbox", ID: "1", Key: "booking-42",
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		Value: handlers.Row{Columns: []string{"id", "aggregate_id", "type", "payload"},
			Values: []any{int64(1), "booking-42", "booking.created", json.RawMessage(`{"seats":2}`)}},
	})
	if err != nil {
		log.Fatal(err)
	}

	// A processor delivering the outbox to it, eight keys at once.
	cc, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	p, err := processor.New(processor.Config[handlers.Row]{
		Process:      "bookings_outbox",
		StartFrom:    inordertype.StartFromBeginning,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:      h,
		MaxInFlight:  8,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
