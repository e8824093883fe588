package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/internal/harness/cetest"
)

// TestCloudEvents POSTs 300 records as CloudEvents in each content mode to a receiver that parses every
// request with the CloudEvents SDK's HTTP binding, and checks each event's attributes against its record.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const n = 300
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{9, 8, 7}, SpanID: trace.SpanID{6, 5, 4}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	traceparent := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	base := time.Date(2026, 3, 4, 5, 6, 7, 890000000, time.UTC)
	for _, mode := range []cloudevent.Mode{cloudevent.Binary, cloudevent.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				events   []*event.Event
				failures []error
				types    = map[string]int{}
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				msg := cehttp.NewMessageFromHttpRequest(r)
				enc := msg.ReadEncoding()
				ev, err := binding.ToEvent(r.Context(), msg)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failures = append(failures, err)
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				types[enc.String()]++
				events = append(events, ev)
			}))
			t.Cleanup(srv.Close)
			env, err := cloudevent.New(cloudevent.Config{Mode: mode, Type: "com.example.fallback"})
			require.NoError(t, err)
			h, err := webhook.New[handlers.Row](webhook.Config{URL: srv.URL, Signature: webhook.SignatureNone, Envelope: env})
			require.NoError(t, err)
			want := map[string]cetest.Want{}
			for i := range n {
				key := fmt.Sprintf("cust-%d", i%40)
				typ := any("invoice.paid")
				if i%7 == 0 {
					typ = nil
				}
				row := handlers.Row{Columns: []string{"id", "type", "amount", "meta"},
					Values: []any{int64(i + 1), typ, float64(i) / 4, json.RawMessage(`{"k":"v"}`)}}
				rec := &handlers.Record[handlers.Row]{Process: "billing", ID: fmt.Sprint(i + 1), Key: key,
					CreatedAt: base.Add(time.Duration(i) * time.Second), Attempt: 1, Value: row}
				require.NoError(t, h.Handle(ctx, rec))
				data, err := json.Marshal(row)
				require.NoError(t, err)
				w := cetest.Want{ID: "billing:" + rec.ID, Source: "inorder://billing", Type: "invoice.paid",
					Subject: key, Time: rec.CreatedAt, TraceParent: traceparent, Data: string(data)}
				if typ == nil {
					w.Type = "com.example.fallback"
				}
				want[w.ID] = w
			}
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, failures, "requests the SDK could not parse")
			wantEnc := map[cloudevent.Mode]string{cloudevent.Binary: binding.EncodingBinary.String(),
				cloudevent.Structured: binding.EncodingStructured.String()}[mode]
			require.Equal(t, map[string]int{wantEnc: n}, types, "content modes the SDK saw")
			for _, ev := range events {
				w, ok := want[ev.ID()]
				require.True(t, ok, "event id %q", ev.ID())
				delete(want, ev.ID())
				cetest.Check(t, ev, w)
			}
			require.Empty(t, want, "records without their event")
			t.Logf("%s mode: %d/%d events parsed by the CloudEvents SDK", mode, len(events), n)
		})
	}
}
