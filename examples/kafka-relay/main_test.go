package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

func TestMain(m *testing.M) { processortest.Main(m) }

// fast shortens the processor's timings for tests.
func fast(cfg *processor.Config[handlers.Row]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
}

// start runs the relay until the test ends; Stop ends it early and returns what run returned.
func start(t *testing.T, databaseURL string, client *kgo.Client) *processortest.Running {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t))
	return processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, databaseURL, client, log, fast)
	}), nil)
}

// outboxRow is one row of the outbox, as the test checks it against the records.
type outboxRow struct {
	ID          int64
	AggregateID string
	Type        string
	Payload     string
}

// outboxInOrder returns the outbox in the order the processor reads it: by the insert clock, then id.
func outboxInOrder(t *testing.T, db *processortest.DB) []outboxRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		"SELECT id, aggregate_id, type, payload::text FROM outbox ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	require.NoError(t, err)
	return out
}

// appendLives appends n events for each aggregate, one writer per aggregate, the writers concurrent.
func appendLives(t *testing.T, db *processortest.DB, aggregates []string, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, agg := range aggregates {
		wg.Go(func() {
			for i := from; i < from+n; i++ {
				typ := fmt.Sprintf("order.step%d", i)
				if _, err := appendEvent(context.Background(), db.Pool, agg, typ, map[string]any{"order_id": agg, "step": i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// reader consumes the topic from its start.
type reader struct {
	cl   *kgo.Client
	recs []*kgo.Record
	ids  map[string]bool
}

// readUntil polls until n distinct records have been read, failing the test after 30s.
func (r *reader) readUntil(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(r.ids) < n {
		require.True(t, time.Now().Before(deadline), "%d of %d records read", len(r.ids), n)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		for _, rec := range r.cl.PollFetches(ctx).Records() {
			r.recs = append(r.recs, rec)
			r.ids[header(rec, handlers.HeaderID)] = true
		}
		cancel()
	}
}

// TestRelaysOutboxInOrderPerAggregate relays outbox rows of several aggregates, appended before the relay
// starts, while it runs and while it is stopped between two runs, to the in-process cluster. A consumer
// reads every row, with its aggregate as the key, its type as the event_type header and its payload as the
// value; the first copies of each key are in the order of the outbox, in one partition. Copies are
// allowed only from the stop (records of the window after the durable position), at most the window.
func TestRelaysOutboxInOrderPerAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, fake, closeClient, err := connect("")
	require.NoError(t, err)
	require.NotNil(t, fake, "without brokers, connect starts the in-process cluster")
	t.Cleanup(closeClient)
	require.NoError(t, createTopic(ctx, client))
	require.NoError(t, createTopic(ctx, client), "an existing topic is fine")
	db := processortest.NewDB(t, nil)
	require.NoError(t, setup(ctx, db.URL))
	aggregates := []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6", "order-7", "order-8"}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	r := &reader{cl: consumer, ids: map[string]bool{}}

	appendLives(t, db, aggregates, 0, 10)
	relay := start(t, db.URL, client)
	appendLives(t, db, aggregates, 10, 30)
	r.readUntil(t, len(aggregates)*25) // stop mid-stream
	require.NoError(t, relay.Stop())

	appendLives(t, db, aggregates, 40, 10)
	relay = start(t, db.URL, client)
	appendLives(t, db, aggregates, 50, 10)
	r.readUntil(t, len(aggregates)*60)
	processortest.WaitCaughtUp(t, db, process, nil)
	require.NoError(t, relay.Stop())

	rows := outboxInOrder(t, db)
	require.Len(t, rows, len(aggregates)*60)
	byID := map[string]*kgo.Record{}
	perKey := map[string][]string{} // key -> ids first written, in partition order
	partition := map[string]int32{}
	copies := 0
	for _, rec := range r.recs {
		id := header(rec, handlers.HeaderID)
		key := string(rec.Key)
		if p, ok := partition[key]; ok {
			require.Equal(t, p, rec.Partition, "key %s in two partitions", key)
		}
		partition[key] = rec.Partition
		if byID[id] != nil {
			copies++
			continue
		}
		byID[id] = rec
		perKey[key] = append(perKey[key], id)
	}
	want := map[string][]string{}
	for _, row := range rows {
		id := fmt.Sprint(row.ID)
		want[row.AggregateID] = append(want[row.AggregateID], id)
		rec := byID[id]
		require.NotNil(t, rec, "record %s never produced", id)
		require.Equal(t, row.AggregateID, string(rec.Key), "record %s", id)
		require.Equal(t, row.Type, header(rec, handlers.HeaderEventType), "record %s", id)
		require.Equal(t, process, header(rec, handlers.HeaderProcess), "record %s", id)
		require.JSONEq(t, row.Payload, string(rec.Value), "record %s", id)
	}
	require.Len(t, perKey, len(aggregates))
	for _, agg := range aggregates {
		require.Equal(t, want[agg], perKey[agg], "records of %s in outbox order", agg)
	}
	require.LessOrEqual(t, copies, window, "the stop writes again at most the window")
	t.Logf("%d rows relayed across a stop and a restart; %d copies written", len(rows), copies)

	// What the program prints when it stops: every record, partition by partition.
	recs, err := produced(ctx, fake)
	require.NoError(t, err)
	require.Len(t, recs, len(r.recs))
	var out bytes.Buffer
	printProduced(&out, recs)
	require.Contains(t, out.String(), fmt.Sprintf("%d records produced:\n", len(recs)))
	require.Contains(t, out.String(), "key=order-1 event_type=order.step0 inorder_id=")
	require.Equal(t, len(recs)+1, strings.Count(out.String(), "\n"))
}
