package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestOrderPerKey relays an outbox with several aggregates interleaved to a topic of four partitions,
// one record at a time and with a window of 64, and reads the topic back with a consumer: every record
// is there exactly once (nothing failed, so nothing was delivered again), keyed by its aggregate, in one
// partition per key and in order per key.
func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxInFlight int
		rows, keys  int
	}{
		{"one in flight", 1, 60, 5},
		{"64 in flight", 64, 1200, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			h := b.newHandler(t, kafka.Config{Topic: "bookings"})

			ids := b.InsertOutbox(t, 0, tc.rows/2, tc.keys)
			b.Run(t, "orders", h, sinktest.RunOpts{MaxInFlight: tc.maxInFlight})
			ids = append(ids, b.InsertOutbox(t, tc.rows/2, tc.rows-tc.rows/2, tc.keys)...) // more while it runs
			processortest.WaitCaughtUp(t, b.DB, "orders", &processortest.WaitOpts{Timeout: 30 * time.Second})

			recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)
			require.Zero(t, requireOrderedPerKey(t, recs, ids), "no failure, so no copy")
			require.Len(t, recs, len(ids))
			// The values say the same per key: n strictly increases.
			lastN := map[string]int{}
			partitions := map[int32]bool{}
			for _, r := range recs {
				var p struct{ N int }
				require.NoError(t, json.Unmarshal(r.Value, &p))
				require.Greater(t, p.N, lastN[string(r.Key)], "key %s", r.Key)
				require.Equal(t, fmt.Sprintf("k%d", p.N%tc.keys), string(r.Key), "the key is the aggregate")
				lastN[string(r.Key)] = p.N
				partitions[r.Partition] = true
			}
			require.Len(t, lastN, tc.keys)
			require.Greater(t, len(partitions), 1, "keys spread over the partitions")
		})
	}
}

// TestRestartLosesNothing relays with a window of 64, stops the processor mid-stream and starts another
// with a new client (a new producer session), then cuts that one's database connections mid-stream, as
// a crash would: every record is written, first copies in order per key. Each stop may write again
// records of the window after the durable position (records of other keys that had succeeded after one
// that was still waiting), at most the window each, and nothing before the position.
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	const window, keys = 64, 20
	b := setup(t, nil)
	consumer := newConsumer(t, b.cluster, "bookings")
	ids := b.InsertOutbox(t, 0, 600, keys)

	first := b.Run(t, "restart", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: window})
	consumer.await(t, "a third of the records", func(recs []*kgo.Record) bool { return len(recs) >= 200 })
	require.NoError(t, first.Stop())
	stoppedAt := idNum(t, b.Position(t, "restart"))
	require.Less(t, stoppedAt, idNum(t, ids[len(ids)-1]), "stopped mid-stream")

	ids = append(ids, b.InsertOutbox(t, 600, 600, keys)...)
	second := newClient(t, b.cluster)
	b.Run(t, "restart", b.newHandler(t, kafka.Config{Client: second, Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: window})
	consumer.await(t, "two thirds of the records", func(recs []*kgo.Record) bool { return len(recs) >= 800 })
	// The cut must find the processor mid-stream, its connection named for it while its transaction holds
	// the row. A relay faster than the consumer's look may have caught up by then and ended its
	// transaction: it is given more to do, and the cut tried again, until one lands.
	var cut int
	deadline := time.Now().Add(30 * time.Second)
	for next := 1200; ; next += 600 {
		require.NoError(t, b.DB.Pool.QueryRow(context.Background(), `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'inorder:restart@%'`).Scan(&cut))
		if cut > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the processor's connections were never cut mid-stream")
		ids = append(ids, b.InsertOutbox(t, next, 600, keys)...)
	}

	processortest.WaitCaughtUp(t, b.DB, "restart", &processortest.WaitOpts{Timeout: 30 * time.Second})
	recs := consumer.awaitIDs(t, ids)
	duplicates := requireOrderedPerKey(t, recs, ids)
	copies := map[int64]int{}
	for _, r := range recs {
		copies[idNum(t, header(r, handlers.HeaderID))]++
	}
	var atStop, atCut []int64 // ids written more than once
	for id, n := range copies {
		switch {
		case n == 1:
		case id <= stoppedAt:
			t.Fatalf("record %d written %d times though the position had passed it before the stop", id, n)
		case id <= stoppedAt+window:
			atStop = append(atStop, id)
		default:
			atCut = append(atCut, id)
		}
	}
	slices.Sort(atStop)
	slices.Sort(atCut)
	require.Equal(t, duplicates, len(atStop)+len(atCut), "no record written three times")
	require.LessOrEqual(t, len(atCut), window, "the cut writes again at most the window: %v", atCut)
	t.Logf("%d records over %d keys, window %d: the clean stop and restart with a new producer wrote %d copies, "+
		"the cut connection %d", len(ids), keys, window, len(atStop), len(atCut))
}

// TestBrokerRetriesWriteOnce makes the broker append produce requests and answer them with a retriable
// error anyway, as a broker losing a replica mid-request does: franz-go sends the requests again, and the
// idempotent producer's sequence numbers let the broker drop the copies. Every record is written once,
// within one producer session, though requests were sent twice.
func TestBrokerRetriesWriteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	faults := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bookings",
		Err: kerr.NotEnoughReplicasAfterAppend, Count: 20})
	ids := b.InsertOutbox(t, 0, 300, 10)
	b.Run(t, "retries", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: 64})
	processortest.WaitCaughtUp(t, b.DB, "retries", &processortest.WaitOpts{Timeout: 30 * time.Second})
	require.Positive(t, faults.Hits(), "requests were appended and failed")

	recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)
	require.Zero(t, requireOrderedPerKey(t, recs, ids), "the broker dropped the copies of %d retried requests", faults.Hits())
	require.Len(t, recs, len(ids))
}

// TestOversizedRecordHalts checks that a record too large for Kafka halts the stream with a permanent
// error naming the record and the topic, with the position before it, whether franz-go refuses it (larger
// than the client's batch limit) or the broker does (larger than the topic's max.message.bytes), and that
// nothing of its key after it is written.
func TestOversizedRecordHalts(t *testing.T) {
	t.Parallel()
	// big is a payload of about 4,000 bytes that compression cannot shrink below 2,000.
	const big = `(SELECT jsonb_build_object('big', string_agg(md5(g::text || random()::text), '')) FROM generate_series(1, 120) g)`

	t.Run("refused by the client", func(t *testing.T) {
		t.Parallel()
		b := setup(t, []kgo.Opt{kgo.ProducerBatchMaxBytes(2000)})
		ids := b.InsertOutbox(t, 0, 30, 5)
		bigID := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload) VALUES ('k1', 'booking.created', `+big+`) RETURNING id`)[0]
		ids = append(ids, b.InsertOutbox(t, 30, 30, 5)...)
		b.Run(t, "big", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: 64})

		halt := processortest.WaitHalted(t, b.DB, "big", nil)
		require.Equal(t, bigID, halt.RecordID)
		require.True(t, halt.Permanent, halt.Error)
		require.Contains(t, halt.Error, `kafka: produce record `+bigID+` to topic "bookings": MESSAGE_TOO_LARGE`)
		require.Regexp(t, `the record is \d+ bytes \(key, value and headers\)`, halt.Error)
		requireStaysHalted(t, b, "big", bigID)

		recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids[:30])
		for _, r := range recs {
			id := idNum(t, header(r, handlers.HeaderID))
			require.NotEqual(t, idNum(t, bigID), id, "the large record was written")
			if string(r.Key) == "k1" {
				require.Less(t, id, idNum(t, bigID), "a record of k1 after the halted one was written")
			}
		}
	})

	t.Run("refused by the broker", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		require.NoError(t, b.cluster.CreateTopic("small", 1, map[string]string{"max.message.bytes": "2000"}))
		ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload) VALUES ('k', 't', '{"small": true}') RETURNING id`)
		bigID := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload) VALUES ('k', 't', `+big+`) RETURNING id`)[0]
		b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload) VALUES ('k', 't', '{"after": true}') RETURNING id`)
		b.Run(t, "brokerbig", b.newHandler(t, kafka.Config{Topic: "small"}), sinktest.RunOpts{MaxInFlight: 64})

		halt := processortest.WaitHalted(t, b.DB, "brokerbig", nil)
		require.Equal(t, bigID, halt.RecordID)
		require.True(t, halt.Permanent, halt.Error)
		require.Contains(t, halt.Error, `kafka: produce record `+bigID+` to topic "small": MESSAGE_TOO_LARGE`)
		requireStaysHalted(t, b, "brokerbig", bigID)
		recs := newConsumer(t, b.cluster, "small").awaitIDs(t, ids)
		require.Len(t, recs, 1, "only the record before the large one: %s", describe(recs))
	})
}

// requireStaysHalted waits for two more attempts at the halted record and checks that the position
// stayed before it.
func requireStaysHalted(t *testing.T, b *bundle, process, id string) {
	t.Helper()
	halt := processortest.WaitHalted(t, b.DB, process, nil)
	attempts := halt.Attempts
	require.Eventually(t, func() bool {
		return processortest.WaitHalted(t, b.DB, process, nil).Attempts >= attempts+2
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, id, processortest.WaitHalted(t, b.DB, process, nil).RecordID)
	require.Less(t, idNum(t, b.Position(t, process)), idNum(t, id), "the position moved past the halted record")
}

// TestMissingOrInvalidTopicHalts relays an outbox whose rows name their topic: a row for a topic that
// does not exist (the brokers do not create topics) halts the stream with a permanent error naming the
// record and the topic, until the topic is created; a row whose topic Kafka cannot accept halts it until
// the row is fixed. The position never passes a halted record, and every record is written in the end.
func TestMissingOrInvalidTopicHalts(t *testing.T) {
	t.Parallel()
	// franz-go looks for a missing topic a few times, at most once per MetadataMinAge (5s by default).
	b := setup(t, []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond)})
	insert := func(key, topic string) string {
		return b.Insert(t, `INSERT INTO outbox (aggregate_id, type, topic, payload) VALUES ($1, 't', $2, '{}') RETURNING id`,
			key, topic)[0]
	}
	var ids []string
	for i := range 6 {
		ids = append(ids, insert(fmt.Sprintf("k%d", i%3), "bookings"))
	}
	refund := insert("k1", "refunds")
	for i := range 6 {
		ids = append(ids, insert(fmt.Sprintf("k%d", i%3), ""))
	}
	invalid := insert("k2", "not a topic!")
	ids = append(ids, insert("k0", "bookings"))
	b.Run(t, "topics", b.newHandler(t, kafka.Config{Topic: "bookings", TopicColumn: "topic"}), sinktest.RunOpts{MaxInFlight: 64})

	halt := processortest.WaitHalted(t, b.DB, "topics", &processortest.WaitOpts{Timeout: 30 * time.Second})
	require.Equal(t, refund, halt.RecordID)
	require.True(t, halt.Permanent, halt.Error)
	require.Contains(t, halt.Error, `kafka: produce record `+refund+` to topic "refunds": UNKNOWN_TOPIC_OR_PARTITION`)
	require.Contains(t, halt.Error, "the topic does not exist and the brokers do not create it")
	requireStaysHalted(t, b, "topics", refund)

	require.NoError(t, b.cluster.CreateTopic("refunds", 1, nil))
	halt = processortest.WaitHalted(t, b.DB, "topics", &processortest.WaitOpts{Timeout: 30 * time.Second})
	for halt.RecordID == refund { // the next attempt, at the longest backoff, goes through
		halt = processortest.WaitHalted(t, b.DB, "topics", nil)
	}
	require.Equal(t, invalid, halt.RecordID)
	require.True(t, halt.Permanent, halt.Error)
	require.Contains(t, halt.Error, `kafka: record `+invalid+`: topic "not a topic!" is not a valid Kafka topic name`)
	requireStaysHalted(t, b, "topics", invalid)

	b.DB.Exec(t, "UPDATE outbox SET topic = 'refunds' WHERE id = $1", invalid) // fix the record: the next retry takes it
	processortest.WaitCaughtUp(t, b.DB, "topics", nil)
	recs := newConsumer(t, b.cluster, "bookings", "refunds").awaitIDs(t, append(ids, refund, invalid))
	for _, r := range recs {
		switch header(r, handlers.HeaderID) {
		case refund, invalid:
			require.Equal(t, "refunds", r.Topic)
		default:
			require.Equal(t, "bookings", r.Topic)
		}
	}
}

// TestTransientFailureRetries makes the broker refuse every produce with a retriable error for a while:
// franz-go retries until the client's RecordDeliveryTimeout, the handler returns an ordinary error, the
// stream halts on the first record and retries it with backoff; once the broker accepts again, every
// record is written, in order per key.
func TestTransientFailureRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, []kgo.Opt{kgo.RecordDeliveryTimeout(time.Second)})
	faults := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bookings",
		Err: kerr.NotEnoughReplicas, Count: -1})
	ids := b.InsertOutbox(t, 0, 200, 5)
	b.Run(t, "transient", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{MaxInFlight: 64, HandlerTimeout: 20 * time.Second})

	halt := processortest.WaitFailing(t, b.DB, "transient", nil)
	require.Eventually(t, func() bool {
		halt = processortest.WaitFailing(t, b.DB, "transient", nil)
		return halt.Attempts >= 2
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, ids[0], halt.RecordID)
	require.False(t, halt.Permanent, halt.Error)
	require.Contains(t, halt.Error, `kafka: produce record `+ids[0]+` to topic "bookings": records have timed out`)
	require.Empty(t, b.Position(t, "transient"))

	faults.Remove()
	processortest.WaitCaughtUp(t, b.DB, "transient", &processortest.WaitOpts{Timeout: 30 * time.Second})
	recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)
	duplicates := requireOrderedPerKey(t, recs, ids)
	t.Logf("%d records, %d copies written after the broker recovered", len(ids), duplicates)
}

// TestProduceIsBoundedByItsContext lets the broker refuse every produce with a retriable error, with no
// delivery timeout on the client, so that franz-go retries forever: Handle must still return when its
// context ends, with an ordinary error naming the record. Once the broker accepts again, the record is
// delivered, possibly twice (the first produce was still in flight), never out of order.
func TestProduceIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := b.newHandler(t, kafka.Config{Topic: "bookings"})
	faults := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bookings",
		Err: kerr.NotEnoughReplicas, Count: -1})
	rec := record("7", "k", handlers.Row{Columns: []string{"payload"}, Values: []any{json.RawMessage(`{"n":1}`)}})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- h.Handle(ctx, rec) }()
	var err error
	require.Eventually(t, func() bool {
		select {
		case err = <-returned:
			return true
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond, "Handle did not return after its context ended")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, handlers.IsPermanent(err))
	require.ErrorContains(t, err, `kafka: record 7 to topic "bookings": no acknowledgement yet`)
	require.Positive(t, faults.Hits())

	// Delivered again as the processor would, the record goes through once the broker accepts again. The
	// first produce may have been written too, before it.
	faults.Remove()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return h.Handle(ctx, rec) == nil
	}, 30*time.Second, 10*time.Millisecond)
	recs := newConsumer(t, b.cluster, "bookings").awaitIDs(t, []string{"7"})
	require.LessOrEqual(t, len(recs), 2, describe(recs))
}

func record(id, key string, row handlers.Row) *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{Process: "p", ID: id, Key: key,
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC), Value: row}
}

// TestRecordContents checks the Kafka record built from an outbox row (key, payload as the value,
// headers) through the processor, and from other rows directly: the whole row without a payload column,
// a NULL payload as a tombstone, no key, a configured type column, and the topic chosen in code.
func TestRecordContents(t *testing.T) {
	t.Parallel()

	t.Run("outbox row", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.Insert(t, `INSERT INTO outbox (aggregate_id, type, payload)
			VALUES ('booking-7', 'booking.created', '{"seats": 2, "name": "Ada"}') RETURNING id`)
		var payload string
		var createdAt time.Time
		require.NoError(t, b.DB.Pool.QueryRow(context.Background(),
			"SELECT payload::text, created_at FROM outbox WHERE id = $1", ids[0]).Scan(&payload, &createdAt))
		b.Run(t, "contents", b.newHandler(t, kafka.Config{Topic: "bookings"}), sinktest.RunOpts{})

		r := newConsumer(t, b.cluster, "bookings").awaitIDs(t, ids)[0]
		require.Equal(t, payload, string(r.Value), "the payload column's bytes are the value")
		require.Equal(t, "booking-7", string(r.Key))
		require.Equal(t, map[string]string{
			handlers.HeaderID:        ids[0],
			handlers.HeaderProcess:   "contents",
			handlers.HeaderCreatedAt: createdAt.UTC().Format(time.RFC3339Nano),
			handlers.HeaderEventType: "booking.created",
		}, headers(r))
		at, err := time.Parse(time.RFC3339Nano, header(r, handlers.HeaderCreatedAt))
		require.NoError(t, err)
		require.True(t, at.Equal(createdAt))
	})

	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, kfake.SeedTopics(1, "audit", "kinds"))
		ctx := context.Background()
		consumer := newConsumer(t, b.cluster, "audit", "kinds")

		whole := b.newHandler(t, kafka.Config{Topic: "audit"})
		require.NoError(t, whole.Handle(ctx, record("1", "a-1", handlers.Row{
			Columns: []string{"id", "event_type", "body", "extra"},
			Values:  []any{int64(1), "user.renamed", "hello", json.RawMessage(`{"x": [1, 2]}`)},
		})))
		require.NoError(t, whole.Handle(ctx, record("2", "a-1", handlers.Row{Columns: []string{"id", "payload"}, Values: []any{int64(2), nil}})))
		require.NoError(t, whole.Handle(ctx, record("3", "", handlers.Row{Columns: []string{"id", "payload"}, Values: []any{int64(3), []byte{0, 0xff}}})))
		wholeForced := b.newHandler(t, kafka.Config{Topic: "audit", PayloadColumn: handlers.WholeRecord})
		require.NoError(t, wholeForced.Handle(ctx, record("4", "a-1", handlers.Row{Columns: []string{"id", "payload"}, Values: []any{int64(4), "text"}})))
		kinds := b.newHandler(t, kafka.Config{TypeColumn: "kind", PayloadColumn: "body",
			TopicFunc: func(rec *handlers.Record[handlers.Row]) (string, error) { return "kinds", nil }})
		require.NoError(t, kinds.Handle(ctx, record("5", "a-2", handlers.Row{Columns: []string{"type", "kind", "body"}, Values: []any{"no", "yes", "plain text"}})))

		recs := consumer.awaitIDs(t, []string{"1", "2", "3", "4", "5"})
		byID := map[string]*kgo.Record{}
		for _, r := range recs {
			byID[header(r, handlers.HeaderID)] = r
		}
		require.JSONEq(t, `{"id": 1, "event_type": "user.renamed", "body": "hello", "extra": {"x": [1, 2]}}`, string(byID["1"].Value))
		require.True(t, strings.HasPrefix(string(byID["1"].Value), `{"id":1,`), "columns in order: %s", byID["1"].Value)
		require.Equal(t, "user.renamed", header(byID["1"], handlers.HeaderEventType), "event_type when there is no type column")
		require.Equal(t, "2024-05-06T07:08:09.123456Z", header(byID["1"], handlers.HeaderCreatedAt))
		require.Nil(t, byID["2"].Value, "a NULL payload is a tombstone")
		require.NotContains(t, headers(byID["2"]), handlers.HeaderEventType)
		require.Nil(t, byID["3"].Key, "no key")
		require.Equal(t, []byte{0, 0xff}, byID["3"].Value, "bytea as is")
		require.JSONEq(t, `{"id": 4, "payload": "text"}`, string(byID["4"].Value))
		require.Equal(t, "kinds", byID["5"].Topic)
		require.Equal(t, "yes", header(byID["5"], handlers.HeaderEventType))
		require.Equal(t, "plain text", string(byID["5"].Value))
	})

	t.Run("topic choice failures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		noFallback := b.newHandler(t, kafka.Config{TopicColumn: "topic"})
		err := noFallback.Handle(ctx, record("8", "k", handlers.Row{Columns: []string{"topic"}, Values: []any{nil}}))
		require.True(t, handlers.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, `record 8 has no topic in column "topic" (NULL, empty or not selected), and no default topic is set`)

		failing := b.newHandler(t, kafka.Config{TopicFunc: func(rec *handlers.Record[handlers.Row]) (string, error) {
			return "", errors.New("lookup failed")
		}})
		err = failing.Handle(ctx, record("9", "k", handlers.Row{}))
		require.False(t, handlers.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, "kafka: choose the topic of record 9: lookup failed")

		// The one topic of every record does not exist: the sink's outage, not the record's refusal.
		fixed := b.newHandler(t, kafka.Config{Topic: "nowhere"})
		err = fixed.Handle(ctx, record("10", "k", handlers.Row{}))
		u, ok := handlers.UnavailableOf(err)
		require.True(t, ok, "%v", err)
		require.False(t, handlers.IsPermanent(err), "%v", err)
		require.Contains(t, u.Check, `the topic "nowhere" (--kafka-topic)`)
	})
}

func headers(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// TestNew checks the configuration errors, the client options refused, and that franz-go's defaults
// are accepted.
func TestNew(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster()
	require.NoError(t, err)
	t.Cleanup(c.Close)
	defaults := newClient(t, c)
	for _, tc := range []struct {
		name string
		cfg  kafka.Config
		want string
	}{
		{"no client", kafka.Config{Topic: "t"}, "kafka: Config.Client is required"},
		{"no topic", kafka.Config{Client: defaults}, "one of Config.Topic, Config.TopicColumn and Config.TopicFunc is required"},
		{"invalid topic", kafka.Config{Client: defaults, Topic: "a b"}, `kafka: Config.Topic: topic "a b" is not a valid Kafka topic name`},
		{"topic too long", kafka.Config{Client: defaults, Topic: strings.Repeat("t", 250)}, "is not a valid Kafka topic name"},
		{"dot topic", kafka.Config{Client: defaults, Topic: ".."}, `topic ".." is not a valid Kafka topic name`},
		{"not idempotent", kafka.Config{Client: newClient(t, c, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())), Topic: "t"},
			"kafka: Config.Client: DisableIdempotentWrite is set"},
		{"transactional", kafka.Config{Client: newClient(t, c, kgo.TransactionalID("tx")), Topic: "t"},
			"TransactionalID is set"},
		{"manual flushing", kafka.Config{Client: newClient(t, c, kgo.ManualFlushing()), Topic: "t"},
			"ManualFlushing is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kafka.New(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, cfg := range []kafka.Config{
		{Client: defaults, Topic: "orders.v1_x-y"},
		{Client: defaults, TopicColumn: "topic"},
		{Client: newClient(t, c, kgo.RecordDeliveryTimeout(time.Second), kgo.ProducerBatchMaxBytes(1<<20)), Topic: "t"},
	} {
		_, err := kafka.New(cfg)
		require.NoError(t, err)
	}
}

// TestAMissingTopicParksItsKey relays with --on-halt park: a record for a topic that does not exist parks
// its key, and the other keys are written in full. Once the topic exists, a redrive writes the key's
// records, the first to its topic, in order.
func TestAMissingTopicParksItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond)})
	insert := func(key, topic string) string {
		return b.Insert(t, `INSERT INTO outbox (aggregate_id, type, topic, payload) VALUES ($1, 't', $2, '{}') RETURNING id`,
			key, topic)[0]
	}
	var others, parked []string
	for i := range 6 {
		others = append(others, insert(fmt.Sprintf("k%d", i%3*2), "bookings")) // k0, k2, k4
	}
	refund := insert("k1", "refunds")
	parked = append(parked, refund)
	for i := range 6 {
		others = append(others, insert(fmt.Sprintf("k%d", i%3*2), ""))
		parked = append(parked, insert("k1", ""))
	}
	b.Run(t, "topics", b.newHandler(t, kafka.Config{Topic: "bookings", TopicColumn: "topic"}),
		sinktest.RunOpts{MaxInFlight: 64, OnHalt: processor.OnHaltPark})

	newConsumer(t, b.cluster, "bookings").awaitIDs(t, others)
	var keys []cursor.ParkedKey
	require.Eventually(t, func() bool {
		var err error
		keys, err = cursor.Parked(context.Background(), b.DB.Pool, "topics")
		require.NoError(t, err)
		return len(keys) == 1 && keys[0].Records == len(parked)
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, "k1", keys[0].Key)
	require.Equal(t, refund, keys[0].Head)
	require.True(t, keys[0].Permanent)
	require.Contains(t, keys[0].Error, "UNKNOWN_TOPIC_OR_PARTITION")
	processortest.WaitCaughtUp(t, b.DB, "topics", nil) // the position went past the parked key

	require.NoError(t, b.cluster.CreateTopic("refunds", 1, nil))
	_, err := cursor.Redrive(context.Background(), b.DB.Pool, "topics", cursor.RedriveOpts{Key: "k1",
		ActionOpts: cursor.ActionOpts{Actor: "test", Reason: "the topic exists now"}})
	require.NoError(t, err)
	recs := newConsumer(t, b.cluster, "bookings", "refunds").awaitIDs(t, append(others, parked...))
	var k1 []string
	seen := map[string]bool{}
	for _, r := range recs {
		if id := header(r, handlers.HeaderID); string(r.Key) == "k1" && r.Topic == "bookings" && !seen[id] {
			seen[id] = true
			k1 = append(k1, id)
		}
	}
	require.Equal(t, parked[1:], k1, "the key's records in the topic, first written in order")
	require.Eventually(t, func() bool {
		keys, err := cursor.Parked(context.Background(), b.DB.Pool, "topics")
		require.NoError(t, err)
		return len(keys) == 0
	}, 30*time.Second, 20*time.Millisecond)
}
