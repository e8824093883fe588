package pubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents publishes records as CloudEvents in each content mode and parses every message with
// the CloudEvents SDK: the Pub/Sub binding's ce- attributes and content-type in binary mode, the JSON
// event format in structured mode.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	for _, mode := range []cloudevent.Mode{cloudevent.Binary, cloudevent.Structured} {
		env, err := cloudevent.New(cloudevent.Config{Mode: mode})
		require.NoError(t, err)
		topic := f.topic(t, "ce-"+string(mode))
		h := newHandler(t, pubsub.Config{Client: f.client, Topic: topic, Envelope: env})
		const n = 50
		want := map[string]cetest.Want{}
		for i := range n {
			payload := fmt.Sprintf(`{"seats":%d}`, i)
			r := &handlers.Record[handlers.Row]{Process: "bookings", ID: fmt.Sprint(i + 1), Key: fmt.Sprintf("k%d", i%5),
				CreatedAt: time.Date(2025, 7, 8, 9, 10, 11, i*1000, time.UTC), Attempt: 1,
				Value: handlers.Row{Columns: []string{"id", "event_type", "payload"},
					Values: []any{int64(i + 1), "booking.made", json.RawMessage(payload)}}}
			require.NoError(t, h.Handle(context.Background(), r))
			want["bookings:"+r.ID] = cetest.Want{ID: "bookings:" + r.ID, Source: "inorder://bookings", Type: "booking.made",
				Subject: r.Key, Time: r.CreatedAt, Data: payload}
		}
		msgs := f.messages(topic)
		require.Len(t, msgs, n)
		for _, m := range msgs {
			ev, err := (&cetest.Message{Prefix: "ce-", Headers: m.Attributes, ContentType: m.Attributes["content-type"],
				Body: m.Data}).Event(context.Background())
			require.NoError(t, err, "%s mode", mode)
			w, ok := want[ev.ID()]
			require.True(t, ok, "event id %q", ev.ID())
			delete(want, ev.ID())
			cetest.Check(t, ev, w)
			require.Equal(t, ev.Subject(), m.OrderingKey)
		}
		require.Empty(t, want, "%s mode", mode)
	}
}
