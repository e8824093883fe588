package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/jetstream"
)

// Example publishes two records of one key through a handler to a subject per key, and publishes the
// first again as a processor restarted after a crash would: the stream's duplicate window drops it. It
// needs a NATS server with JetStream on (nats-server -js) at nats.DefaultURL, so it is compiled, not run.
// With the processor, the handler goes into processor.Config.Handler instead, and
// processor.Config.MaxInFlight sets how many records of different keys wait for their ack at once.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL, nats.Name("inorder"), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close() // after the processor has stopped
	js, err := njs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The stream is the operator's: the handler creates none. Its duplicate window must outlast a crash
	// and the restart after it (the lease).
	if _, err := js.CreateOrUpdateStream(ctx, njs.StreamConfig{Name: "BOOKINGS", Subjects: []string{"bookings.>"},
		Duplicates: 5 * time.Minute}); err != nil {
		log.Fatal(err)
	}

	h, err := jetstream.New(jetstream.Config{JetStream: js, Subject: "bookings.{key}"})
	if err != nil {
		log.Fatal(err)
	}
	stream, err := h.Check(ctx) // "no stream captures subject bookings.*" without one
	if err != nil {
		log.Fatal(err)
	}
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	recs := make([]*handlers.Record[handlers.Row], 2)
	for i, typ := range []string{"booking.created", "booking.confirmed"} {
		recs[i] = &handlers.Record[handlers.Row]{
			Process:   "bookings_outbox",
			ID:        fmt.Sprint(i + 1),
			CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Key:       "booking-42", // the aggregate_id column: subject bookings.booking-42
			Value: handlers.Row{
				Columns: []string{"id", "aggregate_id", "type", "payload"},
				Values:  []any{int64(i + 1), "booking-42", typ, json.RawMessage(`{"seats":2}`)},
			},
		}
	}
	for _, rec := range append(recs, recs[0]) { // the first one twice
		if err := h.Handle(ctx, rec); err != nil { // returns once the stream acknowledged the record
			log.Fatal(err)
		}
	}

	cons, err := js.OrderedConsumer(ctx, stream, njs.OrderedConsumerConfig{FilterSubjects: []string{h.Subject("booking-42")}})
	if err != nil {
		log.Fatal(err)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		log.Fatal(err)
	}
	for m := range batch.Messages() {
		fmt.Printf("%s %s %s %s\n", m.Subject(), m.Headers().Get(njs.MsgIDHeader),
			m.Headers().Get(handlers.HeaderEventType), m.Data())
	}
	// A stream that was empty holds:
	// bookings.booking-42 bookings_outbox:1 booking.created {"seats":2}
	// bookings.booking-42 bookings_outbox:2 booking.confirmed {"seats":2}
}
