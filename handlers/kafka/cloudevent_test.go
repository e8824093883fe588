package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents produces 300 records as CloudEvents in each content mode and reads every one back
// with the CloudEvents SDK's binding machinery, through the Kafka binding's headers (ce_ and
// content-type), checking each attribute against its record.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const n = 300
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	traceparent := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	base := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, mode := range []cloudevent.Mode{cloudevent.Binary, cloudevent.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.SeedTopics(4, "events"))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			env, err := cloudevent.New(cloudevent.Config{Mode: mode, Source: "https://shop.example/orders"})
			require.NoError(t, err)
			h, err := kafka.New(kafka.Config{Client: newClient(t, c), Topic: "events", Envelope: env})
			require.NoError(t, err)
			want := map[string]cetest.Want{}
			for i := range n {
				key := fmt.Sprintf("order-%d", i%40)
				payload := fmt.Sprintf(`{"n":%d,"note":"caf\u00e9 \"%d\""}`, i, i)
				typ := any("order.placed")
				if i%10 == 0 {
					typ = nil // the default type
				}
				rec := &handlers.Record[handlers.Row]{Process: "orders", ID: fmt.Sprint(i + 1), Key: key,
					CreatedAt: base.Add(time.Duration(i) * time.Millisecond), Attempt: 1,
					Value: handlers.Row{Columns: []string{"id", "type", "payload"},
						Values: []any{int64(i + 1), typ, json.RawMessage(payload)}}}
				require.NoError(t, h.Handle(ctx, rec))
				w := cetest.Want{ID: "orders:" + rec.ID, Source: "https://shop.example/orders", Type: "order.placed",
					Subject: key, Time: rec.CreatedAt, TraceParent: traceparent, Data: payload}
				if typ == nil {
					w.Type = cloudevent.DefaultType
				}
				want[w.ID] = w
			}
			cons := newConsumer(t, c, "events")
			recs := cons.await(t, fmt.Sprintf("%d records", n), func(recs []*kgo.Record) bool { return len(recs) >= n })
			parsed := 0
			for _, r := range recs {
				hs := headers(r)
				m := &cetest.Message{Prefix: "ce_", Headers: hs, ContentType: hs["content-type"], Body: r.Value}
				ev, err := m.Event(context.Background())
				if !assert.NoError(t, err, "record %s", hs[handlers.HeaderID]) {
					continue
				}
				w, ok := want[ev.ID()]
				if !assert.True(t, ok, "event id %q", ev.ID()) {
					continue
				}
				delete(want, ev.ID())
				cetest.Check(t, ev, w)
				require.Equal(t, w.Subject, string(r.Key))
				parsed++
			}
			require.Equal(t, n, parsed, "events the SDK parsed")
			require.Empty(t, want)
			t.Logf("%s mode: %d/%d events parsed by the CloudEvents SDK", mode, parsed, n)
		})
	}
}
