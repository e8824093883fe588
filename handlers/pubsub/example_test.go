package pubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"slices"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
)

// Example publishes two records through a handler to the in-process Pub/Sub fake and shows the messages.
// With the processor, the handler goes into processor.Config.Handler instead, and the processor calls Send
// and waits on the results in order. Against Pub/Sub or its emulator, build the client with
// gpubsub.NewClient(ctx, project) alone: it honours PUBSUB_EMULATOR_HOST.
func Example() {
	ctx := context.Background()
	srv := pstest.NewServer()
	defer srv.Close()
	client, err := gpubsub.NewClient(ctx, "my-project",
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{
		Name: "projects/my-project/topics/bookings",
	}); err != nil {
		log.Fatal(err)
	}

	h, err := pubsub.New(pubsub.Config{Client: client, Topic: "bookings"})
	if err != nil {
		log.Fatal(err)
	}
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i, typ := range []string{"booking.created", "booking.confirmed"} {
		rec := &handlers.Record[handlers.Row]{
			Process:   "bookings_outbox",
			ID:        fmt.Sprint(i + 1),
			CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Key:       "booking-42", // the aggregate_id column: the ordering key
			Value: handlers.Row{
				Columns: []string{"id", "aggregate_id", "type", "payload"},
				Values:  []any{int64(i + 1), "booking-42", typ, json.RawMessage(`{"seats":2}`)},
			},
		}
		if err := h.Handle(ctx, rec); err != nil {
			log.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		log.Fatal(err)
	}

	for _, m := range srv.Messages() {
		fmt.Printf("%s key=%s data=%s\n", m.Topic, m.OrderingKey, m.Data)
		keys := make([]string, 0, len(m.Attributes))
		for k := range m.Attributes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Printf("  %s=%s\n", k, m.Attributes[k])
		}
	}
	// Output:
	// projects/my-project/topics/bookings key=booking-42 data={"seats":2}
	//   event_type=booking.created
	//   inorder_created_at=2024-05-06T07:08:09Z
	//   inorder_id=1
	//   inorder_process=bookings_outbox
	// projects/my-project/topics/bookings key=booking-42 data={"seats":2}
	//   event_type=booking.confirmed
	//   inorder_created_at=2024-05-06T07:08:09.001Z
	//   inorder_id=2
	//   inorder_process=bookings_outbox
}
