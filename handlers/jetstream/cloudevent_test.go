package jetstream_test

import (
	"context"
	"fmt"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/jetstream"
	"github.com/inorder-dev/inorder/internal/ceformat"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents publishes records as CloudEvents in the NATS binding's structured mode and parses each
// stored message with the CloudEvents SDK; New refuses the binary mode, which the binding does not define.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	binary, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Binary})
	require.NoError(t, err)
	_, err = jetstream.New(jetstream.Config{JetStream: b.js, Subject: "orders.all", Envelope: binary})
	require.ErrorContains(t, err, "the CloudEvents NATS binding defines the structured mode only")

	env, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Structured})
	require.NoError(t, err)
	h, err := jetstream.New(jetstream.Config{JetStream: b.js, Subject: "orders.{key}", Envelope: env})
	require.NoError(t, err)
	const n = 50
	want := map[string]cetest.Want{}
	for i := range n {
		r := record(fmt.Sprint(i+1), fmt.Sprintf("c%d", i%5))
		require.NoError(t, h.Handle(context.Background(), r))
		want["orders_outbox:"+r.ID] = cetest.Want{ID: "orders_outbox:" + r.ID, Source: "inorder://orders_outbox",
			Type: "order.created", Subject: r.Key, Time: r.CreatedAt, Data: `{"id":` + r.ID + `}`}
	}
	msgs := b.messages(t, "ORDERS")
	require.Len(t, msgs, n)
	for _, m := range msgs {
		require.Equal(t, ceformat.StructuredContentType, m.Header.Get("Content-Type"))
		ev, err := (&cetest.Message{ContentType: m.Header.Get("Content-Type"), Body: m.Data}).Event(context.Background())
		require.NoError(t, err)
		w, ok := want[ev.ID()]
		require.True(t, ok, "event id %q", ev.ID())
		delete(want, ev.ID())
		cetest.Check(t, ev, w)
		require.Equal(t, ev.ID(), m.Header.Get(njs.MsgIDHeader), "the event id is the message id")
	}
	require.Empty(t, want)
}
