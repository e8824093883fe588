package cloudevent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

// Example sends an outbox record as a CloudEvent in structured mode: the envelope goes to a handler's
// Config.Envelope, and the handler makes the event of each record, here the body of a webhook's request.
func Example() {
	env, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Structured, Source: "https://shop.example/orders"})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Header.Get("Content-Type"))
		fmt.Println(string(body))
	}))
	defer srv.Close()
	h, err := webhook.New[handlers.Row](webhook.Config{URL: srv.URL, Signature: webhook.SignatureNone,
		BodyColumn: "payload", Envelope: env})
	if err != nil {
		panic(err)
	}
	rec := &handlers.Record[handlers.Row]{Process: "orders_outbox", ID: "42", Key: "order-7", Attempt: 1,
		CreatedAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC),
		Value:     handlers.Row{Columns: []string{"type", "payload"}, Values: []any{"order.placed", `{"total":12.5}`}}}
	if err := h.Handle(context.Background(), rec); err != nil {
		panic(err)
	}
	// Output:
	// application/cloudevents+json; charset=UTF-8
	// {"specversion":"1.0","id":"orders_outbox:42","source":"https://shop.example/orders","type":"order.placed","subject":"order-7","time":"2026-05-06T07:08:09Z","datacontenttype":"application/json","data":{"total":12.5}}
}
