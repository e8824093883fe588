package redisstream_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/internal/ceformat"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents adds records as CloudEvents in the structured mode, the one a stream entry can carry
// whole, and parses each entry's data with the CloudEvents SDK; New refuses the binary mode, for which
// CloudEvents has no Redis binding.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	binary, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Binary})
	require.NoError(t, err)
	_, err = redisstream.New(redisstream.Config{Client: b.client, Stream: "ce", Envelope: binary})
	require.ErrorContains(t, err, "CloudEvents has no Redis binding")

	env, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Structured})
	require.NoError(t, err)
	h := b.newHandler(t, redisstream.Config{Stream: "ce:{key}", Envelope: env})
	created := time.Date(2024, 5, 6, 7, 8, 9, 123000, time.UTC)
	const n = 50
	want := map[string]cetest.Want{}
	for i := range n {
		id := strconv.Itoa(i + 1)
		rec := &handlers.Record[handlers.Row]{Process: "orders_outbox", ID: id, CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Key: "c" + strconv.Itoa(i%5), Value: handlers.Row{Columns: []string{"id", "type", "payload"},
				Values: []any{int64(i + 1), "order.created", json.RawMessage(`{"id":` + id + `}`)}}}
		require.NoError(t, h.Handle(ctx, rec))
		want["orders_outbox:"+id] = cetest.Want{ID: "orders_outbox:" + id, Source: "inorder://orders_outbox",
			Type: "order.created", Subject: rec.Key, Time: rec.CreatedAt, Data: `{"id":` + id + `}`}
	}
	got := 0
	for k := range 5 {
		msgs, err := b.client.XRange(ctx, "ce:c"+strconv.Itoa(k), "-", "+").Result()
		require.NoError(t, err)
		for _, m := range msgs {
			got++
			require.Equal(t, ceformat.StructuredContentType, m.Values[redisstream.FieldContentType])
			data, _ := m.Values[redisstream.FieldData].(string)
			ev, err := (&cetest.Message{ContentType: ceformat.StructuredContentType, Body: []byte(data)}).Event(ctx)
			require.NoError(t, err)
			w, ok := want[ev.ID()]
			require.True(t, ok, "event id %q", ev.ID())
			delete(want, ev.ID())
			cetest.Check(t, ev, w)
			require.Equal(t, ev.ID(), m.Values[redisstream.FieldProcess].(string)+":"+m.Values[redisstream.FieldID].(string),
				"the event id names the record, as the entry's fields do")
		}
	}
	require.Equal(t, n, got)
	require.Empty(t, want)
}
