package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaFlagsGetOneClearLine checks that every wrong use of the Kafka flags is refused with exit code 2
// and one line naming the flag, before any position moves.
func TestKafkaFlagsGetOneClearLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	kafkaArgs := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "kafka", "--kafka-brokers", "127.0.0.1:1", "--kafka-topic", "bookings"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no brokers", runArgs("--handler", "kafka", "--kafka-topic", "bookings"),
			"inorder run: --handler kafka needs --kafka-brokers (host:port, comma-separated)"},
		{"blank brokers", runArgs("--handler", "kafka", "--kafka-brokers", " , ", "--kafka-topic", "bookings"),
			"--handler kafka needs --kafka-brokers"},
		{"no topic", runArgs("--handler", "kafka", "--kafka-brokers", "127.0.0.1:1"),
			"--handler kafka needs --kafka-topic or --kafka-topic-column"},
		{"invalid topic", kafkaArgs("--kafka-topic", "a b"), `kafka: Config.Topic: topic "a b" is not a valid Kafka topic name`},
		{"kafka flags with stdout", runArgs("--kafka-brokers", "127.0.0.1:1"), "--kafka-* flags need --handler kafka"},
		{"kafka flags with pubsub", runArgs("--handler", "pubsub", "--pubsub-project", "p", "--pubsub-topic", "t",
			"--kafka-max-in-flight", "4"), "--kafka-* flags need --handler kafka"},
		{"pubsub flags with kafka", kafkaArgs("--pubsub-topic", "t"), "--webhook-* and --pubsub-* flags contradict --handler kafka"},
		{"window below one", kafkaArgs("--kafka-max-in-flight", "0"), "--kafka-max-in-flight must be at least 1, got 0"},
		{"delivery timeout over the handler timeout", kafkaArgs("--kafka-delivery-timeout", "40s"),
			"--kafka-delivery-timeout (40s) must be at least 1s and shorter than the handler timeout (10s: --handler-timeout"},
		{"delivery timeout below a second", kafkaArgs("--kafka-delivery-timeout", "500ms"),
			"--kafka-delivery-timeout (500ms) must be at least 1s"},
		{"message bytes", kafkaArgs("--kafka-max-message-bytes", "100"),
			"--kafka-max-message-bytes must be between 512 and 104857600, got 100"},
		{"unknown handler", runArgs("--handler", "pigeon"), `unknown --handler "pigeon": use stdout, webhook, pubsub, kafka, nats, rabbitmq or redis`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, b.env, tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
	require.Empty(t, b.position(t), "no position moved")
}

// TestRunRelaysToKafka runs the binary with --handler kafka and a window of 8 against an in-process
// cluster: a consumer reads every booking once, keyed by its aggregate, whole as JSON, in order per key;
// SIGTERM stops it cleanly with the position at the last booking.
func TestRunRelaysToKafka(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cluster, err := kfake.NewCluster(kfake.SeedTopics(3, "bookings"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	const total = 90
	b.book(t, total, "2.5")

	p := startBinary(t, b.env, runArgs("--handler", "kafka", "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--kafka-topic", "bookings", "--kafka-max-in-flight", "8")...)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("bookings"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	var recs []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(recs) < total {
		require.True(t, time.Now().Before(deadline), "%d of %d records consumed; logs:\n%s", len(recs), total, p.logs())
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		recs = append(recs, consumer.PollFetches(ctx).Records()...)
		cancel()
	}
	require.Eventually(t, func() bool { return b.position(t) == strconv.Itoa(total) }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	require.Len(t, recs, total, "each booking once")
	last := map[string]int64{}
	for _, r := range recs {
		var row struct {
			ID          int64   `json:"id"`
			AggregateID string  `json:"aggregate_id"`
			Amount      float64 `json:"amount"`
			Details     struct {
				Seats int64 `json:"seats"`
			} `json:"details"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &row), "the whole row as JSON: %s", r.Value)
		require.Equal(t, row.AggregateID, string(r.Key), "the key column is the record key")
		require.Equal(t, 2.5, row.Amount)
		require.Equal(t, row.ID, row.Details.Seats)
		require.Greater(t, row.ID, last[row.AggregateID], "order per key")
		last[row.AggregateID] = row.ID
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		require.Equal(t, "booking_sms", headers["inorder_process"])
		require.Equal(t, strconv.FormatInt(row.ID, 10), headers["inorder_id"])
	}
	require.Len(t, last, 3)
}
