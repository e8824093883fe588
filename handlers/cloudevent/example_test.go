package cloudevent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
)

// Example makes the event of an outbox record in structured mode, the body a sink sends; in a program,
// the envelope goes to a handler's Config.Envelope instead, and the handler makes the events.
func Example() {
	env, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Structured, Source: "https://shop.example/orders"})
	if err != nil {
		panic(err)
	}
	rec := &handlers.Record[handlers.Row]{Process: "orders_outbox", ID: "42", Key: "order-7",
		CreatedAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	ev := cloudevent.Of(context.Background(), env, rec, "order.placed", []byte(`{"total":12.5}`))
	body, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	// Output:
	// {"specversion":"1.0","id":"orders_outbox:42","source":"https://shop.example/orders","type":"order.placed","subject":"order-7","time":"2026-05-06T07:08:09Z","datacontenttype":"application/json","data":{"total":12.5}}
}
