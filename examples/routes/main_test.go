package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

func TestMain(m *testing.M) { processortest.Main(m) }

// fast shortens the processors' timings for tests.
func fast(cfg *processor.Config[handlers.Row]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
}

// ids is a list of record ids received, safe for concurrent use.
type ids struct {
	mu  sync.Mutex
	got []int64
}

func (s *ids) add(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, id)
}

func (s *ids) list() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.got...)
}

// lockedBuffer is standard output, written by one route and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// ids reads the record ids of the JSON lines written so far.
func (l *lockedBuffer) ids(t *testing.T) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var line struct {
			Process string `json:"process"`
			Record  struct {
				ID int64 `json:"id"`
			} `json:"record"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		require.Equal(t, shipmentsRoute, line.Process)
		out = append(out, line.Record.ID)
	}
	return out
}

// TestRoutesOneOutboxThreeWays: writers append the lives of several orders, each transaction mixing events
// of every type, while the three routes run: the webhook receives exactly the payment events, stdout
// exactly the shipment events, Kafka every event, each once and in the outbox's order per order.
func TestRoutesOneOutboxThreeWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := processortest.NewDB(t, nil)
	require.NoError(t, setup(ctx, db.URL))

	fake, err := kfake.NewCluster()
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	require.NoError(t, createTopic(ctx, producer))

	hooked := &ids{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(webhook.IdempotencyKeyHeader)
		id, err := strconv.ParseInt(strings.TrimPrefix(key, paymentsRoute+":"), 10, 64)
		if err != nil {
			http.Error(w, "no idempotency key", http.StatusBadRequest)
			return
		}
		hooked.add(id)
	}))
	t.Cleanup(receiver.Close)
	out := &lockedBuffer{}

	log := zerolog.New(zerolog.NewTestWriter(t))
	running := processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, db.URL, Sinks{Kafka: producer, Webhook: Webhook{URL: receiver.URL, Secret: []byte("test-secret")},
			Stdout: out}, log, fast)
	}), nil)

	orders := []string{"order-1", "order-2", "order-3", "order-4"}
	types := []string{"order.placed", "payment.authorized", "payment.captured", "shipment.dispatched", "order.completed"}
	var wg sync.WaitGroup
	for _, order := range orders {
		wg.Go(func() {
			for range 10 {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				for _, typ := range types {
					if _, err := appendEvent(ctx, tx, order, typ, map[string]string{"order_id": order}); err != nil {
						t.Error(err)
						return
					}
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, route := range []string{paymentsRoute, analyticsRoute, shipmentsRoute} {
		processortest.WaitCaughtUp(t, db, route, nil)
	}
	require.NoError(t, running.Stop())

	type row struct {
		ID          int64
		AggregateID string
		Type        string
	}
	rows, err := db.Pool.Query(ctx, "SELECT id, aggregate_id, type FROM outbox ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	outbox, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Len(t, outbox, len(orders)*10*len(types))
	// want is each route's ids, in the outbox's order, per order.
	want := func(keep func(typ string) bool) map[string][]int64 {
		m := map[string][]int64{}
		for _, r := range outbox {
			if keep(r.Type) {
				m[r.AggregateID] = append(m[r.AggregateID], r.ID)
			}
		}
		return m
	}
	keyOf := map[int64]string{}
	for _, r := range outbox {
		keyOf[r.ID] = r.AggregateID
	}
	perKey := func(got []int64) map[string][]int64 {
		m := map[string][]int64{}
		for _, id := range got {
			m[keyOf[id]] = append(m[keyOf[id]], id)
		}
		return m
	}

	require.Equal(t, want(func(typ string) bool { return strings.HasPrefix(typ, "payment.") }), perKey(hooked.list()),
		"the webhook: exactly the payments, once each, in order per order")
	require.Equal(t, want(func(typ string) bool { return typ == "shipment.dispatched" }), perKey(out.ids(t)),
		"stdout: exactly the shipments, once each, in order per order")

	consumer, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	var produced []int64
	deadline := time.Now().Add(30 * time.Second)
	for len(produced) < len(outbox) {
		require.True(t, time.Now().Before(deadline), "%d of %d records read from Kafka", len(produced), len(outbox))
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		for _, rec := range consumer.PollFetches(pctx).Records() {
			for _, h := range rec.Headers {
				if h.Key == handlers.HeaderID {
					id, err := strconv.ParseInt(string(h.Value), 10, 64)
					require.NoError(t, err)
					require.Equal(t, keyOf[id], string(rec.Key), "record %d keyed by its order", id)
					produced = append(produced, id)
				}
			}
		}
		cancel()
	}
	require.Equal(t, want(func(string) bool { return true }), perKey(produced),
		"Kafka: every event, once each, in order per order")
	t.Log(fmt.Sprintf("%d events: %d to the webhook, %d to stdout, %d to Kafka", len(outbox), len(hooked.list()),
		len(out.ids(t)), len(produced)))
}
