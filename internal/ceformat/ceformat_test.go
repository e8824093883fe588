package ceformat_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

func record(key string) *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{Process: "orders outbox", ID: "42", Key: key, Attempt: 3,
		CreatedAt: time.Date(2026, 2, 3, 4, 5, 6, 789000000, time.FixedZone("CET", 3600))}
}

// TestStructured checks the JSON event format with the SDK's own parser: JSON data as data, other bytes
// as data_base64, no data at all, and the attributes left out when the record has no value for them.
func TestStructured(t *testing.T) {
	t.Parallel()
	env, err := cloudevent.New(cloudevent.Config{Mode: cloudevent.Structured})
	require.NoError(t, err)
	require.Equal(t, cloudevent.Structured, env.Mode())
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, TraceState: must(trace.ParseTraceState("vendor=x"))})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)

	for _, tc := range []struct {
		name, key, typ string
		data           []byte
		ctx            context.Context
		wantCT         string
		wantData       string
	}{
		{"json", "customer-1", "order.placed", []byte(`{"a":[1,2]}`), ctx, "application/json", `{"a":[1,2]}`},
		{"bytes", "customer-1", "", []byte{0xff, 0x00, 'x'}, context.Background(), "application/octet-stream", "\xff\x00x"},
		{"no data", "", "", nil, context.Background(), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := ceformat.Of(tc.ctx, (*ceformat.Envelope)(env), record(tc.key), tc.typ, tc.data)
			b, err := json.Marshal(ev)
			require.NoError(t, err)
			var got event.Event
			require.NoError(t, json.Unmarshal(b, &got), "%s", b)
			require.NoError(t, got.Validate())
			require.Equal(t, "1.0", got.SpecVersion())
			require.Equal(t, "orders outbox:42", got.ID())
			require.Equal(t, "inorder:orders%20outbox", got.Source())
			require.Equal(t, tc.key, got.Subject())
			require.True(t, got.Time().Equal(record("").CreatedAt))
			require.Contains(t, string(b), `"time":"2026-02-03T03:05:06.789Z"`, "UTC, RFC 3339")
			require.Equal(t, tc.wantCT, got.DataContentType())
			require.Equal(t, tc.wantData, string(got.Data()))
			if tc.typ == "" {
				require.Equal(t, cloudevent.DefaultType, got.Type())
			} else {
				require.Equal(t, tc.typ, got.Type())
			}
			if tc.ctx == ctx {
				require.Equal(t, "00-01000000000000000000000000000000-0200000000000000-01", got.Extensions()["traceparent"])
				require.Equal(t, "vendor=x", got.Extensions()["tracestate"])
			} else {
				require.Empty(t, got.Extensions(), "no trace, no traceparent")
				require.NotContains(t, string(b), "subject\":\"\"")
			}
			if tc.name == "bytes" {
				require.Contains(t, string(b), `"data_base64":"/wB4"`)
			}
		})
	}
}

// TestBinaryAttributes checks the attributes a binary-mode message carries as headers.
func TestBinaryAttributes(t *testing.T) {
	t.Parallel()
	env, err := cloudevent.New(cloudevent.Config{Source: "https://example.com/shop", Type: "com.example.default"})
	require.NoError(t, err)
	require.Equal(t, cloudevent.Binary, env.Mode(), "binary by default")
	ev := ceformat.Of(context.Background(), (*ceformat.Envelope)(env), record("k 1"), "", []byte(`"x"`))
	require.Equal(t, []ceformat.Attribute{
		{Name: "specversion", Value: "1.0"}, {Name: "id", Value: "orders outbox:42"},
		{Name: "source", Value: "https://example.com/shop"}, {Name: "type", Value: "com.example.default"},
		{Name: "time", Value: "2026-02-03T03:05:06.789Z"}, {Name: "subject", Value: "k 1"},
	}, ev.Attributes())
	require.Equal(t, "application/json", ev.DataContentType)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
