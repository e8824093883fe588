package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// Sizes of the Kafka measures.
const (
	kafkaKeys       = 64     // aggregates (record keys) the outbox is spread over
	kafkaPartitions = 8      // partitions of the topic
	kafkaRowsOne    = 10000  // one record in flight
	kafkaRowsMany   = 100000 // 64 in flight
	kafkaInFlight   = 64
)

// kafkaLines are the Kafka lines of the table: raw franz-go to kfake, then inorder beside it.
func kafkaLines() []line {
	return []line{
		{key: "kafka_raw1", label: "franz-go to kfake, 1 producer, sync", limit: true},
		{key: "kafka_raw64", label: "franz-go to kfake, 64 producers, sync", limit: true},
		{key: "kafka1", label: "inorder kafka to kfake, in flight 1", ref: "kafka_raw1", refLabel: "franz-go, 1 producer"},
		{key: "kafka64", label: "inorder kafka to kfake, in flight 64", ref: "kafka_raw64", refLabel: "franz-go, 64 producers",
			target: &target{v: 0.8}},
	}
}

// kafkaNote is the footnote on the Kafka lines.
func kafkaNote(note func(format string, args ...any)) {
	note("kafka: an in-process kfake cluster (one broker process, the Kafka protocol over loopback), a topic of %d "+
		"partitions, franz-go's default producer (idempotent, acks all); the outbox spread over %d keys, %s rows with "+
		"one in flight and %s with %d; inorder with checkpoint batch and BatchSize 1000, the handler producing each "+
		"record synchronously, the keyed window making %d at once. The references are plain franz-go clients "+
		"producing the same records to the same cluster: one goroutine, and %d goroutines each producing its share "+
		"one record after another (ProduceSync), with no database.", kafkaPartitions, kafkaKeys,
		thousands(kafkaRowsOne), thousands(kafkaRowsMany), kafkaInFlight, kafkaInFlight, kafkaInFlight)
}

// newKafka starts an in-process cluster with the bench topic and returns a producing client on it.
func newKafka(tb testing.TB) (*kfake.Cluster, *kgo.Client) {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.SeedTopics(kafkaPartitions, "bench"))
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordDeliveryTimeout(10*time.Second))
	if err != nil {
		tb.Fatalf("kafka client: %v", err)
	}
	tb.Cleanup(cl.Close)
	return c, cl
}

// stored is how many records the cluster holds on the bench topic.
func stored(c *kfake.Cluster) int64 {
	var n int64
	for _, p := range c.PartitionInfos("bench") {
		n += p.HighWatermark
	}
	return n
}

// measureKafkaRaw produces n records like the outbox's (key, a small JSON value, the handler's headers)
// with producers goroutines, each producing its share one record at a time and waiting for each.
func measureKafkaRaw(tb testing.TB, producers, n int) result {
	c, cl := newKafka(tb)
	ctx := context.Background()
	// One record first, so that the topic's metadata is loaded before the clock starts, as it is for
	// the processor after its first record.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "bench", Value: []byte("{}")}).FirstErr(); err != nil {
		tb.Fatalf("produce: %v", err)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for p := range producers {
		wg.Go(func() {
			for g := p; g < n; g += producers { // records p, p+producers, ...: this producer's share
				r := &kgo.Record{Topic: "bench", Key: []byte("k" + strconv.Itoa(g%kafkaKeys)),
					Value: fmt.Appendf(nil, `{"booking":%d,"seats":2,"status":"created"}`, g),
					Headers: []kgo.RecordHeader{{Key: handlers.HeaderID, Value: []byte(strconv.Itoa(g))},
						{Key: handlers.HeaderProcess, Value: []byte("bench")},
						{Key: handlers.HeaderCreatedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
						{Key: handlers.HeaderEventType, Value: []byte("booking.created")}}}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					tb.Errorf("produce: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if got := stored(c); got != int64(n)+1 {
		tb.Fatalf("kfake holds %d records, want %d", got, n+1)
	}
	return result{n: n, elapsed: elapsed}
}

// measureKafka drains an outbox of n rows (jsonb payload, kafkaKeys keys) through the Kafka handler to an
// in-process cluster with inFlight records at once, 1000-record batches and a checkpoint per batch.
func measureKafka(tb testing.TB, inFlight, n int) result {
	db := pgtest.New(tb)
	insertOutbox(tb, db, n, kafkaKeys)
	lastID, lastAt := lastRow(tb, db, "outbox")
	noteServer(tb, db.Pool)

	c, cl := newKafka(tb)
	h, err := kafka.New(kafka.Config{Client: cl, Topic: "bench"})
	if err != nil {
		tb.Fatalf("kafka handler: %v", err)
	}
	res := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     fmt.Sprintf("bench_kafka_%d", inFlight),
		Source:      inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		BatchSize:   1000,
		Checkpoint:  processor.CheckpointBatch,
	}, n, lastID, lastAt, 3*time.Minute)
	if got := stored(c); got != int64(n) { // nothing failed, so nothing was produced twice
		tb.Fatalf("kfake holds %d records, want %d", got, n)
	}
	return res
}

func BenchmarkKafka(b *testing.B) {
	b.Run("raw1", func(b *testing.B) {
		record(b, "kafka_raw1", measureKafkaRaw(b, 1, kafkaRowsOne))
	})
	b.Run("inflight1", func(b *testing.B) {
		record(b, "kafka1", measureKafka(b, 1, kafkaRowsOne))
	})
	b.Run("raw64", func(b *testing.B) {
		record(b, "kafka_raw64", measureKafkaRaw(b, kafkaInFlight, kafkaRowsMany))
	})
	b.Run("inflight64", func(b *testing.B) {
		record(b, "kafka64", measureKafka(b, kafkaInFlight, kafkaRowsMany))
	})
}

// TestKafkaMeasures runs the Kafka measures on a few rows, so that the benchmark keeps working. It records
// no figures.
func TestKafkaMeasures(t *testing.T) {
	for name, r := range map[string]result{
		"raw1":       measureKafkaRaw(t, 1, 20),
		"raw64":      measureKafkaRaw(t, kafkaInFlight, 300),
		"inflight1":  measureKafka(t, 1, 20),
		"inflight64": measureKafka(t, kafkaInFlight, 300),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
}
