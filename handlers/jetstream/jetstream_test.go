package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/jetstream"
)

func newHandler(t *testing.T, b *bundle, subject string) *jetstream.Handler {
	t.Helper()
	h, err := jetstream.New(jetstream.Config{JetStream: b.js, Subject: subject})
	require.NoError(t, err)
	return h
}

// TestRecordContents publishes a record and reads it back: its payload as the data, its id, process,
// created_at, key, type and Nats-Msg-Id as headers, and the trace context of the publish.
func TestRecordContents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newHandler(t, b, "orders.all")
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	require.NoError(t, h.Handle(ctx, record("7", "customer-1")))
	noKey := record("8", "")
	noKey.Value = handlers.Row{Columns: []string{"id", "amount"}, Values: []any{int64(8), 2.5}}
	require.NoError(t, h.Handle(context.Background(), noKey))

	msgs := b.messages(t, "ORDERS")
	require.Len(t, msgs, 2)
	m := msgs[0]
	require.Equal(t, "orders.all", m.Subject)
	require.JSONEq(t, `{"id":7}`, string(m.Data))
	require.Equal(t, "orders_outbox:7", m.Header.Get("Nats-Msg-Id"))
	require.Equal(t, "7", m.Header.Get(handlers.HeaderID))
	require.Equal(t, "orders_outbox", m.Header.Get(handlers.HeaderProcess))
	require.Equal(t, "2024-05-06T07:08:09Z", m.Header.Get(handlers.HeaderCreatedAt))
	require.Equal(t, "customer-1", m.Header.Get(handlers.HeaderKey))
	require.Equal(t, "order.created", m.Header.Get(handlers.HeaderEventType))
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", m.Header.Get("traceparent"),
		"the trace context under its W3C name, lower case")

	m = msgs[1]
	require.JSONEq(t, `{"id":8,"amount":2.5}`, string(m.Data), "no payload column: the whole row")
	require.Empty(t, m.Header.Values(handlers.HeaderKey), "no key, no key header")
	require.Empty(t, m.Header.Values(handlers.HeaderEventType), "no type, no type header")
	require.Empty(t, m.Header.Values("traceparent"), "no trace, no trace context")
}

// TestARedeliveryIsDropped publishes records, then publishes them again as a restarted processor would:
// the stream's duplicate window drops the second copies, and Handle reports them stored.
func TestARedeliveryIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newHandler(t, b, "orders.all")
	for range 2 {
		for i := 1; i <= 3; i++ {
			require.NoError(t, h.Handle(context.Background(), record(fmt.Sprint(i), "customer-1")))
		}
	}
	msgs := b.messages(t, "ORDERS")
	require.Len(t, msgs, 3, "each record once")
	for i, m := range msgs {
		require.Equal(t, fmt.Sprint(i+1), m.Header.Get(handlers.HeaderID))
	}
}

// TestOrderPerKeyBySubject publishes records of four keys, the keys at once and each key's records one
// at a time as the processor's window does, to a subject per key: each key's subject holds its records
// in order.
func TestOrderPerKeyBySubject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newHandler(t, b, "orders.{key}.created")
	require.Equal(t, "orders.customer-2.created", h.Subject("customer-2"))
	var wg sync.WaitGroup
	for k := range 4 {
		wg.Go(func() {
			for i := range 25 {
				require.NoError(t, h.Handle(context.Background(), record(fmt.Sprint(i*4+k+1), fmt.Sprint("customer-", k))))
			}
		})
	}
	wg.Wait()
	msgs := b.messages(t, "ORDERS")
	require.Len(t, msgs, 100)
	last := map[string]int{}
	for _, m := range msgs {
		key := m.Header.Get(handlers.HeaderKey)
		require.Equal(t, "orders."+key+".created", m.Subject)
		var id int
		_, err := fmt.Sscan(m.Header.Get(handlers.HeaderID), &id)
		require.NoError(t, err)
		require.Greater(t, id, last[key], "order per key")
		last[key] = id
	}
	require.Len(t, last, 4)
}

// TestCheckNamesTheSubjectNoStreamCaptures checks the start-up check: the stream capturing the subject,
// or an error naming the subject that none captures.
func TestCheckNamesTheSubjectNoStreamCaptures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for subject, stream := range map[string]string{"orders.all": "ORDERS", "orders.{key}": "ORDERS"} {
		name, err := newHandler(t, b, subject).Check(ctx)
		require.NoError(t, err, subject)
		require.Equal(t, stream, name, subject)
	}
	for subject, named := range map[string]string{"invoices": "invoices", "invoices.{key}": "invoices.*"} {
		_, err := newHandler(t, b, subject).Check(ctx)
		require.EqualError(t, err, "jetstream: no stream captures subject "+named+": add it to a stream's subjects")
	}
}

// TestSinkRefusalsAreUnavailable checks that what every record would meet is the sink's outage: a stream
// deleted mid-run (no stream captures the subject), and a closed connection.
func TestSinkRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newHandler(t, b, "orders.{key}")
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, record("1", "customer-1")))
	require.NoError(t, b.js.DeleteStream(ctx, "ORDERS"))
	err := h.Handle(ctx, record("2", "customer-1"))
	u, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "%v", err)
	require.False(t, handlers.IsPermanent(err))
	require.ErrorContains(t, err, "no stream captures subject orders.customer-1")
	require.Contains(t, u.Check, "orders.customer-1")

	b.nc.Close()
	err = h.Handle(ctx, record("3", "customer-1"))
	_, ok = handlers.UnavailableOf(err)
	require.True(t, ok, "a closed connection: %v", err)
}

// TestRecordRefusalsArePermanent checks that what only this record meets halts as the record's: a
// message over the server's max_payload or the stream's max_msg_size, and a key that is no subject token.
func TestRecordRefusalsArePermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.js.CreateStream(ctx, njs.StreamConfig{Name: "SMALL", Subjects: []string{"small"}, MaxMsgSize: 1024})
	require.NoError(t, err)
	big := func(n int) *handlers.Record[handlers.Row] {
		rec := record("1", "customer-1")
		rec.Value.Values[3] = []byte(`"` + strings.Repeat("x", n) + `"`)
		return rec
	}
	for _, tc := range []struct {
		subject string
		rec     *handlers.Record[handlers.Row]
		want    string
	}{
		{"orders.all", big(2 << 20), "more than the server's max_payload"},
		{"small", big(2048), "more than the stream's max_msg_size"},
		{"orders.{key}", record("1", "a.b"), `key "a.b" in subject orders.{key}: a key is one subject token`},
		{"orders.{key}", record("1", ""), "the record has no key"},
	} {
		err := newHandler(t, b, tc.subject).Handle(ctx, tc.rec)
		require.True(t, handlers.IsPermanent(err), "%s: %v", tc.want, err)
		_, unavailable := handlers.UnavailableOf(err)
		require.False(t, unavailable, "%v", err)
		require.ErrorContains(t, err, tc.want)
	}
	require.NoError(t, newHandler(t, b, "small").Handle(ctx, big(100)), "a record within the limits goes")
}

// TestNew checks the configuration New refuses.
func TestNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		cfg  jetstream.Config
		want string
	}{
		{jetstream.Config{Subject: "orders"}, "jetstream: Config.JetStream is required"},
		{jetstream.Config{JetStream: b.js}, "jetstream: Config.Subject is required"},
		{jetstream.Config{JetStream: b.js, Subject: "orders.*"}, `Config.Subject "orders.*": a subject to publish to holds no wildcard`},
		{jetstream.Config{JetStream: b.js, Subject: "orders..x"}, "none of them empty"},
		{jetstream.Config{JetStream: b.js, Subject: "orders.a{key}"}, "{key} must be a whole token"},
	} {
		_, err := jetstream.New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	h, err := jetstream.New(jetstream.Config{JetStream: b.js, Subject: "orders", PayloadColumn: "body", TypeColumn: "kind"})
	require.NoError(t, err)
	require.Equal(t, []string{"body", "kind"}, h.ReadsColumns())
}
