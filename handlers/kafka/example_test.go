package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
)

// Example produces two records through a handler to kfake, an in-process Kafka cluster, and reads them
// back. With the processor, the handler goes into processor.Config.Handler instead, and
// processor.Config.MaxInFlight sets how many records of different keys it produces at once. Against a
// real cluster, build the client with kgo.SeedBrokers and the cluster's TLS and SASL options.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "bookings"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.RecordDeliveryTimeout(10*time.Second)) // below the processor's HandlerTimeout (30s by default)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	h, err := kafka.New(kafka.Config{Client: client, Topic: "bookings"})
	if err != nil {
		log.Fatal(err)
	}
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i, typ := range []string{"booking.created", "booking.confirmed"} {
		rec := &handlers.Record[handlers.Row]{
			Process:   "bookings_outbox",
			ID:        fmt.Sprint(i + 1),
			CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Key:       "booking-42", // the aggregate_id column: the Kafka record key
			Value: handlers.Row{
				Columns: []string{"id", "aggregate_id", "type", "payload"},
				Values:  []any{int64(i + 1), "booking-42", typ, json.RawMessage(`{"seats":2}`)},
			},
		}
		if err := h.Handle(ctx, rec); err != nil { // returns once the brokers acknowledged the record
			log.Fatal(err)
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("bookings"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	for n := 0; n < 2; {
		fetches := consumer.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			fmt.Printf("%s/%d@%d key=%s value=%s\n", r.Topic, r.Partition, r.Offset, r.Key, r.Value)
			for _, hdr := range r.Headers {
				fmt.Printf("  %s=%s\n", hdr.Key, hdr.Value)
			}
		})
	}
	// Output:
	// bookings/0@0 key=booking-42 value={"seats":2}
	//   inorder_id=1
	//   inorder_process=bookings_outbox
	//   inorder_created_at=2024-05-06T07:08:09Z
	//   event_type=booking.created
	// bookings/0@1 key=booking-42 value={"seats":2}
	//   inorder_id=2
	//   inorder_process=bookings_outbox
	//   inorder_created_at=2024-05-06T07:08:09.001Z
	//   event_type=booking.confirmed
}
