package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// fast shortens the processor's timings for tests.
func fast(cfg *processor.Config[handlers.Row]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
}

// start runs the relay until the test ends; Stop ends it early and returns what run returned.
func start(t *testing.T, databaseURL string, client *gpubsub.Client) *processortest.Running {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t))
	return processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, databaseURL, client, log, fast)
	}), nil)
}

// outboxRow is one row of the outbox, as the test checks it against the messages.
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

// published returns the relay's messages on the topic, in the order the fake stored them.
func published(fake *pstest.Server) []*pstest.Message {
	var out []*pstest.Message
	for _, m := range fake.Messages() {
		if strings.HasSuffix(m.Topic, "/topics/"+topicID) {
			out = append(out, m)
		}
	}
	return out
}

// TestRelaysOutboxInOrderPerAggregate relays outbox rows of several aggregates, appended before the relay
// starts, while it runs and while it is stopped between two runs, to pstest over gRPC. Every row must be
// published exactly once, with its aggregate as the ordering key, its type as the event_type attribute
// and its payload as the data, and the messages of each key must be stored in the order of the outbox.
func TestRelaysOutboxInOrderPerAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, fake, closeClient, err := connect(ctx, "test-project", "")
	require.NoError(t, err)
	require.NotNil(t, fake, "without an emulator, connect starts the in-process fake")
	t.Cleanup(closeClient)
	db := processortest.NewDB(t, nil)
	require.NoError(t, setup(ctx, db.URL))
	aggregates := []string{"order-1", "order-2", "order-3", "order-4", "order-5"}

	appendLives(t, db, aggregates, 0, 10)
	relay := start(t, db.URL, client)
	appendLives(t, db, aggregates, 10, 30)
	require.Eventually(t, func() bool { return len(published(fake)) >= len(aggregates)*40 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, relay.Stop())

	appendLives(t, db, aggregates, 40, 10)
	relay = start(t, db.URL, client)
	appendLives(t, db, aggregates, 50, 10)
	require.Eventually(t, func() bool { return len(published(fake)) >= len(aggregates)*60 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, relay.Stop())

	rows := outboxInOrder(t, db)
	require.Len(t, rows, len(aggregates)*60)
	msgs := published(fake)
	require.Len(t, msgs, len(rows), "every row is published exactly once")

	byID := map[string]*pstest.Message{}
	perKey := map[string][]string{} // ordering key -> record ids in the order the fake stored them
	for _, m := range msgs {
		id := m.Attributes[handlers.HeaderID]
		require.NotContains(t, byID, id, "record %s published twice", id)
		byID[id] = m
		perKey[m.OrderingKey] = append(perKey[m.OrderingKey], id)
	}
	want := map[string][]string{}
	for _, r := range rows {
		id := fmt.Sprint(r.ID)
		want[r.AggregateID] = append(want[r.AggregateID], id)
		m := byID[id]
		require.NotNil(t, m, "record %s never published", id)
		require.Equal(t, r.AggregateID, m.OrderingKey, "record %s", id)
		require.Equal(t, r.Type, m.Attributes[handlers.HeaderEventType], "record %s", id)
		require.Equal(t, process, m.Attributes[handlers.HeaderProcess], "record %s", id)
		require.JSONEq(t, r.Payload, string(m.Data), "record %s", id)
	}
	require.Len(t, perKey, len(aggregates))
	for _, agg := range aggregates {
		require.Equal(t, want[agg], perKey[agg], "messages of %s in outbox order", agg)
	}
}
