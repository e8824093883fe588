package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/redistest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
	"github.com/inorder-dev/inorder/traceparent"
)

// TestOrderPerKey relays an outbox with several aggregates interleaved, to a stream per key and to one
// stream, one record at a time and with a window of 64, and reads the streams back with XRANGE: every
// record is there exactly once (nothing failed, so nothing was delivered again), in order per key.
func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		stream      string
		maxInFlight int
		rows, keys  int
	}{
		{"stream per key, one in flight", "orders:{key}", 1, 60, 5},
		{"stream per key, 64 in flight", "orders:{key}", 64, 1200, 20},
		{"one stream, 64 in flight", "orders", 64, 1200, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			h := b.newHandler(t, redisstream.Config{Stream: tc.stream})
			require.NoError(t, h.Check(context.Background()))

			ids := b.InsertOutbox(t, 0, tc.rows/2, tc.keys)
			b.Run(t, "orders", h, sinktest.RunOpts{MaxInFlight: tc.maxInFlight})
			ids = append(ids, b.InsertOutbox(t, tc.rows/2, tc.rows-tc.rows/2, tc.keys)...) // more while it runs
			processortest.WaitCaughtUp(t, b.DB, "orders", &processortest.WaitOpts{Timeout: 30 * time.Second})

			streams := b.entries(t, "orders*")
			require.Zero(t, requireOrderedPerKey(t, streams, ids), "no failure, so no copy")
			require.Equal(t, len(ids), count(streams))
			if strings.Contains(tc.stream, handlers.KeyPlaceholder) {
				require.Len(t, streams, tc.keys, "a stream per key")
			} else {
				require.Len(t, streams, 1)
			}
			// The data says the same per key: n strictly increases, and the key is the aggregate.
			lastN := map[string]int{}
			for stream, msgs := range streams {
				for _, m := range msgs {
					var p struct{ N int }
					require.NoError(t, json.Unmarshal([]byte(field(m, redisstream.FieldData)), &p))
					key := field(m, redisstream.FieldKey)
					require.Greater(t, p.N, lastN[key], "key %s", key)
					require.Equal(t, fmt.Sprintf("k%d", p.N%tc.keys), key, "the key is the aggregate")
					require.Equal(t, h.StreamOf(key), stream)
					require.Equal(t, "orders", field(m, redisstream.FieldProcess))
					require.Equal(t, "booking.created", field(m, redisstream.FieldEventType))
					lastN[key] = p.N
				}
			}
			require.Len(t, lastN, tc.keys)
		})
	}
}

// TestEntryFields checks an entry's fields in their order, the whole row as data when there is no
// payload column, and the MAXLEN trimming.
func TestEntryFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	h := b.newHandler(t, redisstream.Config{Stream: "{key}.events", PayloadColumn: handlers.WholeRecord, MaxLen: 10})
	created := time.Date(2024, 5, 6, 7, 8, 9, 123000, time.UTC)
	for i := 1; i <= 500; i++ {
		rec := &handlers.Record[handlers.Row]{Process: "p", ID: strconv.Itoa(i), CreatedAt: created, Key: "booking-42",
			Value: handlers.Row{Columns: []string{"id", "type", "payload"}, Values: []any{int64(i), "t", json.RawMessage(`{"a": 1}`)}}}
		require.NoError(t, h.Handle(ctx, rec))
	}
	n, err := b.client.XLen(ctx, "booking-42.events").Result()
	require.NoError(t, err)
	require.Less(t, n, int64(500), "trimmed")
	require.GreaterOrEqual(t, n, int64(10), "about MAXLEN kept")

	// The entry's fields, in order, read raw.
	raw, err := b.client.Do(ctx, "XREVRANGE", "booking-42.events", "+", "-", "COUNT", "1").Slice()
	require.NoError(t, err)
	require.Len(t, raw, 1)
	fields := raw[0].([]any)[1].([]any)
	require.Equal(t, []any{"id", "500", "process", "p", "created_at", "2024-05-06T07:08:09.000123Z", "key", "booking-42",
		"event_type", "t", "data", `{"id":500,"type":"t","payload":{"a":1}}`}, fields)

	// NULL payload: no data field.
	h2 := b.newHandler(t, redisstream.Config{Stream: "nulls"})
	require.NoError(t, h2.Handle(ctx, &handlers.Record[handlers.Row]{Process: "p", ID: "1", CreatedAt: created,
		Value: handlers.Row{Columns: []string{"id", "payload"}, Values: []any{int64(1), nil}}}))
	msgs, err := b.client.XRange(ctx, "nulls", "-", "+").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]any{"id": "1", "process": "p", "created_at": "2024-05-06T07:08:09.000123Z"}, msgs[0].Values)
}

// TestConfigRefused checks what New refuses.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range []struct {
		cfg  redisstream.Config
		want string
	}{
		{redisstream.Config{Stream: "s"}, "redisstream: Config.Client is required"},
		{redisstream.Config{Client: c}, "redisstream: Config.Stream is required"},
		{redisstream.Config{Client: c, Stream: "{key}:{key}"}, `has {key} 2 times`},
		{redisstream.Config{Client: c, Stream: "s", MaxLen: -1}, "Config.MaxLen must not be negative"},
	} {
		_, err := redisstream.New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

// TestWrongTypeOfOneKeyIsTheRecords puts a string where one key's stream would be: that key's first
// record halts the stream with a permanent error naming the record and the stream, and nothing of the
// key after it is added; the records before it of every key are.
func TestWrongTypeOfOneKeyIsTheRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.client.Set(ctx, "orders:k1", "not a stream", 0).Err())
	ids := b.InsertOutbox(t, 0, 20, 4) // k1 first at n=1
	b.Run(t, "wrongtype", b.newHandler(t, redisstream.Config{Stream: "orders:{key}"}), sinktest.RunOpts{MaxInFlight: 8})

	halt := processortest.WaitHalted(t, b.DB, "wrongtype", nil)
	require.Equal(t, ids[0], halt.RecordID)
	require.True(t, halt.Permanent, halt.Error)
	require.False(t, halt.SinkUnavailable(), halt.Error)
	require.Contains(t, halt.Error, `redisstream: XADD record `+ids[0]+` to stream "orders:k1": WRONGTYPE`)
	require.Equal(t, "", b.Position(t, "wrongtype"), "the position stays before it")

	// Fix the key: the stream goes on by itself (at the longest backoff) and every record is added.
	require.NoError(t, b.client.Del(ctx, "orders:k1").Err())
	processortest.WaitCaughtUp(t, b.DB, "wrongtype", &processortest.WaitOpts{Timeout: 20 * time.Second})
	requireOrderedPerKey(t, b.entries(t, "orders:*"), ids)
}

// TestSinkRefusalsAreUnavailable checks that what Redis refuses every record makes the stream wait as a
// sink outage, not halt, and that it flows again by itself once Redis accepts: one stream whose key
// holds another type, and a server turned into a read-only replica.
func TestSinkRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		break_, fix func(ctx context.Context, c *redis.Client) error
		want, check string
	}{
		{"one stream of another type",
			func(ctx context.Context, c *redis.Client) error { return c.Set(ctx, "orders", "x", 0).Err() },
			func(ctx context.Context, c *redis.Client) error { return c.Del(ctx, "orders").Err() },
			`to stream "orders": WRONGTYPE`, `the stream "orders"`},
		{"read-only replica",
			func(ctx context.Context, c *redis.Client) error {
				port, err := pgcluster.FreePort() // a primary that is not there: the replica keeps its data
				if err != nil {
					return err
				}
				return c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(port)).Err()
			},
			func(ctx context.Context, c *redis.Client) error { return c.ReplicaOf(ctx, "NO", "ONE").Err() },
			"READONLY", "read-only replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			require.NoError(t, tc.break_(ctx, b.client))
			ids := b.InsertOutbox(t, 0, 30, 3)
			b.Run(t, "outage", b.newHandler(t, redisstream.Config{Stream: "orders"}), sinktest.RunOpts{MaxInFlight: 8})

			halt := processortest.WaitSinkUnavailable(t, b.DB, "outage", nil)
			require.Contains(t, halt.Error, tc.want)
			require.Contains(t, halt.Unavailable, tc.check)
			require.False(t, halt.Permanent)
			require.Equal(t, ids[0], halt.RecordID)

			require.NoError(t, tc.fix(ctx, b.client))
			processortest.WaitCaughtUp(t, b.DB, "outage", &processortest.WaitOpts{Timeout: 20 * time.Second})
			streams := b.entries(t, "orders")
			require.Zero(t, requireOrderedPerKey(t, streams, ids))
		})
	}
}

// TestCheck checks the start-up check: a server that is not there, a password missing or wrong (NOAUTH,
// WRONGPASS), and one stream whose key is not a stream, each an UnavailableError; and that a record sent
// without the password is refused as the sink's.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Config{Args: []string{"--requirepass", "secret"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := l.Addr().String()
	require.NoError(t, l.Close())
	nowhere := redis.NewClient(&redis.Options{Addr: gone, MaxRetries: -1})
	t.Cleanup(func() { _ = nowhere.Close() })

	for _, tc := range []struct {
		name   string
		client *redis.Client
		stream string
		want   string
	}{
		{"nothing listens", nowhere, "s", "connection refused"},
		{"no password", newClient(t, s, ""), "s", "NOAUTH"},
		{"wrong password", newClient(t, s, "wrong"), "s", "WRONGPASS"},
	} {
		h, err := redisstream.New(redisstream.Config{Client: tc.client, Stream: tc.stream})
		require.NoError(t, err)
		err = h.Check(ctx)
		require.ErrorContains(t, err, tc.want, tc.name)
		u, ok := handlers.UnavailableOf(err)
		require.True(t, ok, "%s: %v", tc.name, err)
		require.NotEmpty(t, u.Check)

		err = h.Handle(ctx, &handlers.Record[handlers.Row]{Process: "p", ID: "1", Key: "k",
			Value: handlers.Row{Columns: []string{"id"}, Values: []any{int64(1)}}})
		if tc.want == "NOAUTH" {
			// Redis refuses a command of more than ten arguments on an unauthenticated connection with a
			// protocol error, before it could say NOAUTH.
			require.ErrorContains(t, err, "unauthenticated", tc.name)
		} else {
			require.ErrorContains(t, err, tc.want, tc.name)
		}
		_, ok = handlers.UnavailableOf(err)
		require.True(t, ok, "%s: %v", tc.name, err)
	}

	good := newClient(t, s, "secret")
	require.NoError(t, good.Set(ctx, "str", "x", 0).Err())
	for stream, ok := range map[string]bool{"str": false, "fresh": true, "str:{key}": true} {
		h, err := redisstream.New(redisstream.Config{Client: good, Stream: stream})
		require.NoError(t, err)
		err = h.Check(ctx)
		if ok {
			require.NoError(t, err, stream)
			continue
		}
		require.ErrorContains(t, err, `key "str" holds a string, not a stream`)
		_, unavailable := handlers.UnavailableOf(err)
		require.True(t, unavailable)
	}
}

// fieldCarrier reads an entry's fields for OpenTelemetry's propagator.
type fieldCarrier map[string]any

func (c fieldCarrier) Get(k string) string { s, _ := c[k].(string); return s }
func (c fieldCarrier) Set(k, v string)     { c[k] = v }
func (c fieldCarrier) Keys() []string {
	var ks []string
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// TestTraceContextTravelsInFields checks that the row's trace context reaches the entry's traceparent
// field, through the XADD's span when the relay is traced.
func TestTraceContextTravelsInFields(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{true, false} {
		name := map[bool]string{true: "traced", false: "untraced relay"}[traced]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.DB.Exec(t, `ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text`)
			ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(context.Background(), "POST /bookings")
			parent, state := traceparent.FromContext(ctx)
			span.End()
			ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload, traceparent, tracestate)
				VALUES ('booking-7', 'booking.created', '{}', $1, $2) RETURNING id`, parent, state)
			o := sinktest.RunOpts{}
			if traced {
				o.TracerProvider = sdktrace.NewTracerProvider()
			}
			b.Run(t, "traced", b.newHandler(t, redisstream.Config{Stream: "orders"}), o)
			processortest.WaitCaughtUp(t, b.DB, "traced", nil)
			msgs := b.entries(t, "orders")["orders"]
			require.Len(t, msgs, 1)
			require.Equal(t, ids[0], field(msgs[0], redisstream.FieldID))
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), fieldCarrier(msgs[0].Values)))
			require.True(t, got.IsValid(), "the entry carries a traceparent field: %v", msgs[0].Values)
			require.Equal(t, span.SpanContext().TraceID(), got.TraceID(), "the application's trace reaches the consumer")
			if !traced {
				require.Equal(t, span.SpanContext().SpanID(), got.SpanID())
			} else {
				require.NotEqual(t, span.SpanContext().SpanID(), got.SpanID(), "the XADD's span is the parent")
			}
		})
	}
}

// TestPipelineSettlesEachRecord sends records of 64 keys at once, so that they go in shared pipelines, one
// key's stream being a string: that record alone fails, as its own (permanent), and every other is added.
func TestPipelineSettlesEachRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.client.Set(ctx, "p:k13", "x", 0).Err())
	h := b.newHandler(t, redisstream.Config{Stream: "p:{key}"})
	for round := range 5 {
		errs := make([]error, 64)
		var wg sync.WaitGroup
		for k := range errs {
			wg.Go(func() {
				errs[k] = h.Handle(ctx, &handlers.Record[handlers.Row]{Process: "p", ID: strconv.Itoa(round*64 + k),
					Key: "k" + strconv.Itoa(k), Value: handlers.Row{Columns: []string{"id"}, Values: []any{int64(k)}}})
			})
		}
		wg.Wait()
		for k, err := range errs {
			if k == 13 {
				require.ErrorContains(t, err, `XADD record `+strconv.Itoa(round*64+k)+` to stream "p:k13": WRONGTYPE`)
				require.True(t, handlers.IsPermanent(err), err.Error())
				continue
			}
			require.NoError(t, err, "key k%d", k)
		}
	}
	require.NoError(t, b.client.Del(ctx, "p:k13").Err())
	streams := b.entries(t, "p:k*")
	require.Len(t, streams, 63)
	require.Equal(t, 63*5, count(streams))

	// A record whose caller stopped waiting before its XADD was sent is not sent.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := h.Handle(cctx, &handlers.Record[handlers.Row]{Process: "p", ID: "x", Key: "k1",
		Value: handlers.Row{Columns: []string{"id"}, Values: []any{int64(1)}}})
	require.ErrorIs(t, err, context.Canceled)
	n, err := b.client.XLen(ctx, "p:k1").Result()
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "not added")
}
