package rabbitmq_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestPublishesEveryRecordInOrderPerKey runs a processor with a window of 8 over 200 records of four
// keys, to a direct exchange with a queue per key: each queue holds its key's records once, in order, as
// persistent messages named by process and id, with the record's headers.
func TestPublishesEveryRecordInOrderPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x := b.exchange(t, amqp.ExchangeDirect)
	queues := map[string]string{}
	for k := range 4 {
		key := "k" + strconv.Itoa(k)
		queues[key] = b.queue(t, key, x, key)
	}
	ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % 4), 'booking.created', jsonb_build_object('n', g)
		FROM generate_series(1, 200) g ORDER BY g RETURNING id`)
	b.Run(t, "bookings", b.newHandler(t, rabbitmq.Config{Exchange: x}), sinktest.RunOpts{MaxInFlight: 8})

	seen := map[string]bool{}
	for key, q := range queues {
		var last int64
		for _, d := range b.consume(t, q, 50) {
			id := d.Headers[handlers.HeaderID].(string)
			n, err := strconv.ParseInt(id, 10, 64)
			require.NoError(t, err)
			require.Greater(t, n, last, "order of key %s: %s", key, id)
			last = n
			require.False(t, seen[id], "record %s once", id)
			seen[id] = true
			require.Equal(t, key, d.RoutingKey, "the key is the routing key")
			require.Equal(t, "bookings:"+id, d.MessageId)
			require.Equal(t, amqp.Persistent, d.DeliveryMode)
			require.Equal(t, "booking.created", d.Type)
			require.Equal(t, "booking.created", d.Headers[handlers.HeaderEventType])
			require.Equal(t, "bookings", d.Headers[handlers.HeaderProcess])
			require.Equal(t, "inorder", d.AppId, "the app_id of every message")
			var body struct{ N int64 }
			require.NoError(t, json.Unmarshal(d.Body, &body), "the payload column as the body: %s", d.Body)
			require.Equal(t, n, body.N)
		}
	}
	require.Len(t, seen, len(ids))
}

// TestAMissingExchangeIsTheSinks checks that CheckExchange names an exchange that does not exist, and that
// a record published to one that is gone is the sink's refusal, which passes once it is declared again.
func TestAMissingExchangeIsTheSinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing := b.newHandler(t, rabbitmq.Config{Exchange: b.name + ".nowhere"})
	err := missing.CheckExchange(context.Background())
	requireUnavailable(t, err, "the exchange")
	require.Equal(t, `rabbitmq: exchange "`+b.name+`.nowhere" does not exist on amqp://127.0.0.1:`+
		strings.Split(b.node.Addr(), ":")[1]+` (virtual host "/")`, err.Error())

	x := b.exchange(t, amqp.ExchangeFanout)
	q := b.queue(t, "q", x, "")
	h := b.newHandler(t, rabbitmq.Config{Exchange: x})
	require.NoError(t, h.CheckExchange(context.Background()))
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, rec("1", "a", `{}`)))
	require.NoError(t, b.ch.ExchangeDelete(x, false, false))
	requireUnavailable(t, h.Handle(ctx, rec("2", "a", `{}`)), "the exchange")
	require.NoError(t, b.ch.ExchangeDeclare(x, amqp.ExchangeFanout, true, false, false, false, nil))
	require.NoError(t, b.ch.QueueBind(q, "", x, false, nil))
	require.NoError(t, h.Handle(ctx, rec("2", "a", `{}`)), "flows again on a new channel")
	got := b.consume(t, q, 2)
	require.Equal(t, []string{"direct:1", "direct:2"}, []string{got[0].MessageId, got[1].MessageId})
}

// TestAnUnroutableRecordIsNeverDropped: with a fixed routing key and no queue bound for it, every record
// would come back, so it is the sink's refusal; with the record's key, once the exchange has routed a
// record, a key without a queue is the record's.
func TestAnUnroutableRecordIsNeverDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	x := b.exchange(t, amqp.ExchangeDirect)
	fixed := b.newHandler(t, rabbitmq.Config{Exchange: x, RoutingKey: "bookings"})
	err := fixed.Handle(ctx, rec("1", "a", `{}`))
	requireUnavailable(t, err, `bind a queue for routing key "bookings"`)
	require.Contains(t, err.Error(), "returned unroutable (312 NO_ROUTE)")

	perKey := b.newHandler(t, rabbitmq.Config{Exchange: x})
	requireUnavailable(t, perKey.Handle(ctx, rec("1", "a", `{}`)), `routing key "a"`) // routes nothing yet
	q := b.queue(t, "a", x, "a")
	require.NoError(t, perKey.Handle(ctx, rec("1", "a", `{}`)))
	err = perKey.Handle(ctx, rec("2", "b", `{}`))
	require.True(t, handlers.IsPermanent(err), "the record's: %v", err)
	require.Contains(t, err.Error(), `record 2 to exchange "`+x+`" with routing key "b" was returned unroutable`)
	require.NoError(t, perKey.Handle(ctx, rec("3", "a", `{}`)), "the channel goes on")
	got := b.consume(t, q, 2)
	require.Equal(t, "direct:1", got[0].MessageId)
	require.Equal(t, "direct:3", got[1].MessageId)
}

// TestARecordOverTheMaxMessageSizeIsPermanent: the node's max_message_size is 1 MiB; a larger body closes
// the channel, which is that record's refusal alone: the next record goes through.
func TestARecordOverTheMaxMessageSizeIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	x := b.exchange(t, amqp.ExchangeFanout)
	q := b.queue(t, "q", x, "")
	h := b.newHandler(t, rabbitmq.Config{Exchange: x})
	big := `"` + strings.Repeat("x", 2<<20) + `"`
	err := h.Handle(ctx, rec("1", "a", big))
	require.True(t, handlers.IsPermanent(err), "the record's: %v", err)
	require.Contains(t, err.Error(), "more than the broker's max_message_size")
	require.NoError(t, h.Handle(ctx, rec("2", "a", `{}`)))
	require.Equal(t, "direct:2", b.consume(t, q, 1)[0].MessageId)
}

// TestABrokerThatCannotBeReachedIsTheSinks: nothing listening, and credentials the broker refuses.
func TestABrokerThatCannotBeReachedIsTheSinks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	down := b.newHandler(t, rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x"})
	requireUnavailable(t, down.Handle(ctx, rec("1", "a", `{}`)), "the URL")
	wrong := b.newHandler(t, rabbitmq.Config{URL: "amqp://guest:wrong@" + b.node.Addr() + "/", Exchange: "x"})
	err := wrong.CheckExchange(ctx)
	requireUnavailable(t, err, "the credentials")
	require.NotContains(t, err.Error(), "wrong", "no password in the error")
}

// TestTraceContextTravelsInHeaders checks that a consumer continues the publish's trace from the headers.
func TestTraceContextTravelsInHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x := b.exchange(t, amqp.ExchangeFanout)
	q := b.queue(t, "q", x, "")
	h := b.newHandler(t, rabbitmq.Config{Exchange: x})
	ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "deliver")
	defer span.End()
	require.NoError(t, h.Handle(ctx, rec("1", "a", `{}`)))
	d := b.consume(t, q, 1)[0]
	carrier := propagation.MapCarrier{}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			carrier[k] = s
		}
	}
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	require.True(t, got.IsValid(), "a traceparent header: %v", d.Headers)
	require.Equal(t, span.SpanContext().TraceID(), got.TraceID())
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  rabbitmq.Config
		want string
	}{
		{rabbitmq.Config{}, "rabbitmq: Config.URL is required"},
		{rabbitmq.Config{URL: "http://x"}, "rabbitmq: Config.URL: "},
		{rabbitmq.Config{URL: "amqp://x", AMQP: amqp.Config{Recovery: &amqp.Recovery{}}}, "Recovery must be nil"},
		{rabbitmq.Config{URL: "amqp://x", RoutingKey: strings.Repeat("k", 256)}, "256 bytes, more than AMQP's 255"},
	} {
		_, err := rabbitmq.New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	_ = time.Second
}

// TestTheStreamWaitsForAQueueToBeBound runs a processor with a fixed routing key that no queue is bound
// for: the stream waits on the sink, saying which binding to check, and flows by itself once a queue is
// bound, every record once and in order (one at a time: the keys share the queue).
func TestTheStreamWaitsForAQueueToBeBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x := b.exchange(t, amqp.ExchangeDirect)
	ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % 3), 'booking.created', jsonb_build_object('n', g)
		FROM generate_series(1, 30) g ORDER BY g RETURNING id`)
	b.Run(t, "unbound", b.newHandler(t, rabbitmq.Config{Exchange: x, RoutingKey: "bookings"}), sinktest.RunOpts{})
	halt := processortest.WaitSinkUnavailable(t, b.DB, "unbound", &processortest.WaitOpts{Timeout: 30 * time.Second})
	require.Contains(t, halt.Unavailable, `bind a queue for routing key "bookings"`)

	q := b.queue(t, "q", x, "bookings")
	processortest.WaitCaughtUp(t, b.DB, "unbound", &processortest.WaitOpts{Timeout: 30 * time.Second})
	var got []string
	for _, d := range b.consume(t, q, len(ids)) {
		got = append(got, d.Headers[handlers.HeaderID].(string))
	}
	require.Equal(t, ids, got, "every record once, in order")
}
