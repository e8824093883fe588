package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/redisstream"
)

// Example adds two records of one booking to the booking's own stream and reads them back. With the
// processor, the handler goes into processor.Config.Handler instead, and processor.Config.MaxInFlight
// sets how many records of different keys it adds at once. It needs a Redis server on localhost:6379, so
// it is compiled but not run.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // a command ends with the processor's HandlerTimeout
	})
	defer client.Close()

	h, err := redisstream.New(redisstream.Config{Client: client, Stream: "bookings:{key}", MaxLen: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Check(ctx); err != nil { // the server answers, with these credentials
		log.Fatal(err)
	}
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i, typ := range []string{"booking.created", "booking.confirmed"} {
		rec := &handlers.Record[handlers.Row]{
			Process:   "bookings_outbox",
			ID:        fmt.Sprint(i + 1),
			CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Key:       "booking-42", // the aggregate_id column: the stream bookings:booking-42
			Value: handlers.Row{
				Columns: []string{"id", "aggregate_id", "type", "payload"},
				Values:  []any{int64(i + 1), "booking-42", typ, json.RawMessage(`{"seats":2}`)},
			},
		}
		if err := h.Handle(ctx, rec); err != nil { // returns once Redis answered with the entry's id
			log.Fatal(err)
		}
	}

	msgs, err := client.XRange(ctx, "bookings:booking-42", "-", "+").Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Println(m.Values[redisstream.FieldID], m.Values[redisstream.FieldEventType], m.Values[redisstream.FieldData])
	}
	// Consumers drop a redelivered record's copy by its id and process fields.
}
