package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/natstest"
)

// bundle is what the tests work with: a throwaway nats-server with JetStream, a connection to it, and a
// stream "ORDERS" capturing orders.> with a duplicate window of a minute.
type bundle struct {
	srv    *natstest.Server
	nc     *nats.Conn
	js     njs.JetStream
	stream njs.Stream
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := natstest.New(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, njs.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
		Duplicates: time.Minute})
	require.NoError(t, err)
	return &bundle{srv: srv, nc: nc, js: js, stream: s}
}

// messages reads back every message of the stream, in stream order.
func (b *bundle) messages(t *testing.T, stream string) []*njs.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var msgs []*njs.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	return msgs
}

// record makes the record of id for key, with a JSON payload and a type.
func record(id, key string) *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{
		Process:   "orders_outbox",
		ID:        id,
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		Key:       key,
		Attempt:   1,
		Value: handlers.Row{
			Columns: []string{"id", "aggregate_id", "type", "payload"},
			Values:  []any{id, key, "order.created", []byte(`{"id":` + id + `}`)},
		},
	}
}
