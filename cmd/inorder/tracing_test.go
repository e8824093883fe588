package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/inorder-dev/inorder/traceparent"
)

// otlpCollector is an OTLP/HTTP receiver of traces: it keeps the spans it is sent.
type otlpCollector struct {
	mu    sync.Mutex
	spans map[string]exported // by span id, hex
}

type exported struct {
	name, traceID, parentID, service string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans[hex.EncodeToString(s.SpanId)] = exported{name: s.Name, traceID: hex.EncodeToString(s.TraceId),
					parentID: hex.EncodeToString(s.ParentSpanId), service: service}
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *otlpCollector) span(id string) (exported, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.spans[id]
	return s, ok
}

func TestRunExportsTracesWithOTLPAndTheWebhookCarriesThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `ALTER TABLE bookings ADD COLUMN trace_parent text`)
	ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "POST /bookings")
	parent, _ := traceparent.FromContext(ctx)
	span.End()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO bookings (aggregate_id, amount, trace_parent) VALUES ('customer-1', 10, $1)`, parent)
	require.NoError(t, err)

	// The receiver reads the context with OpenTelemetry's own propagator.
	received := make(chan trace.SpanContext, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- trace.SpanContextFromContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}))
	defer receiver.Close()
	collector := &otlpCollector{spans: map[string]exported{}}
	otlp := httptest.NewServer(collector)
	defer otlp.Close()

	p := startBinary(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=20"}, b.env...),
		runArgs("--handler", "webhook", "--webhook-url", receiver.URL, "--webhook-signature", "none",
			"--trace-column", "trace_parent")...)
	var got trace.SpanContext
	select {
	case got = <-received:
	case <-time.After(30 * time.Second):
		t.Fatalf("no request; logs:\n%s", p.logs())
	}
	require.Equal(t, span.SpanContext().TraceID(), got.TraceID(), "the application's trace reaches the receiver")

	// The receiver's parent is the webhook's request span, a child of the delivery's, a child of the
	// application's span: exported with OTLP.
	var post, deliver exported
	require.Eventually(t, func() bool {
		var ok bool
		if post, ok = collector.span(got.SpanID().String()); !ok {
			return false
		}
		deliver, ok = collector.span(post.parentID)
		return ok
	}, 30*time.Second, 10*time.Millisecond, "the spans exported; logs:\n%s", p.logs())
	require.Equal(t, "POST", post.name)
	require.Equal(t, "deliver booking_sms", deliver.name)
	require.Equal(t, span.SpanContext().TraceID().String(), deliver.traceID)
	require.Equal(t, span.SpanContext().SpanID().String(), deliver.parentID)
	require.Equal(t, "inorder", deliver.service)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t), p.logs())
	require.Contains(t, p.logs(), `"protocol":"http/protobuf"`)
	require.Contains(t, p.logs(), `"message":"exporting traces with OTLP"`)
}
