package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents publishes records as CloudEvents in each content mode and parses every delivery with
// the CloudEvents SDK: the AMQP binding's cloudEvents: headers and content-type property in binary mode,
// the JSON event format in structured mode.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, mode := range []cloudevent.Mode{cloudevent.Binary, cloudevent.Structured} {
		env, err := cloudevent.New(cloudevent.Config{Mode: mode, Source: "/billing", Type: "com.example.usage"})
		require.NoError(t, err)
		q := b.queue(t, string(mode), "")
		h := b.newHandler(t, rabbitmq.Config{RoutingKey: q, Envelope: env})
		const n = 50
		want := map[string]cetest.Want{}
		for i := range n {
			payload := fmt.Sprintf(`{"quantity":%d}`, i)
			r := rec(fmt.Sprint(i+1), fmt.Sprintf("c%d", i%5), payload)
			require.NoError(t, h.Handle(context.Background(), r))
			want["direct:"+r.ID] = cetest.Want{ID: "direct:" + r.ID, Source: "/billing", Type: "com.example.usage",
				Subject: r.Key, Time: r.CreatedAt, Data: payload}
		}
		for _, d := range b.consume(t, q, n) {
			hs := map[string]string{}
			for k, v := range d.Headers {
				if s, ok := v.(string); ok {
					hs[k] = s
				}
			}
			ev, err := (&cetest.Message{Prefix: "cloudEvents:", Headers: hs, ContentType: d.ContentType, Body: d.Body}).
				Event(context.Background())
			require.NoError(t, err, "%s mode", mode)
			w, ok := want[ev.ID()]
			require.True(t, ok, "event id %q", ev.ID())
			delete(want, ev.ID())
			cetest.Check(t, ev, w)
			require.Equal(t, ev.ID(), d.MessageId, "the event id is the message id")
		}
		require.Empty(t, want, "%s mode", mode)
	}
}
