package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

func TestMain(m *testing.M) { processortest.Main(m) }

const outboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text,
		type         text NOT NULL,
		topic        text,
		payload      jsonb,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON outbox (created_at, id);`

// bundle is what most tests work with: an in-process Kafka cluster, a producing client on it, and a
// database with the outbox table.
type bundle struct {
	cluster *kfake.Cluster
	client  *kgo.Client
	sinktest.Outbox
}

// setup starts a kfake cluster with the topic "bookings" of four partitions (plus whatever opts add), a
// client with franz-go's defaults and the given options, and a database with the outbox table.
func setup(t *testing.T, clientOpts []kgo.Opt, clusterOpts ...kfake.Opt) *bundle {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.SeedTopics(4, "bookings")}, clusterOpts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	db := processortest.NewDB(t, nil)
	db.Exec(t, outboxDDL)
	sinktest.AddClock(t, db, "outbox")
	return &bundle{cluster: c, client: newClient(t, c, clientOpts...), Outbox: sinktest.Outbox{DB: db}}
}

// newClient returns a producing client on the cluster, closed when the test ends.
func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// newHandler returns a handler on the bundle's client.
func (b *bundle) newHandler(t *testing.T, cfg kafka.Config) *kafka.Handler {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = b.client
	}
	h, err := kafka.New(cfg)
	require.NoError(t, err)
	return h
}

// consumer reads topics from their start and keeps every record it has seen, in the order of each
// partition.
type consumer struct {
	cl   *kgo.Client
	recs []*kgo.Record
}

func newConsumer(t *testing.T, c *kfake.Cluster, topics ...string) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &consumer{cl: cl}
}

// poll fetches what has arrived, waiting up to d for something.
func (c *consumer) poll(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	fs := c.cl.PollFetches(ctx)
	for _, e := range fs.Errors() {
		if !errors.Is(e.Err, context.DeadlineExceeded) {
			require.NoError(t, e.Err, "consume %s/%d", e.Topic, e.Partition)
		}
	}
	c.recs = append(c.recs, fs.Records()...)
}

// await polls until cond holds for the records seen so far, and fails the test after 30s.
func (c *consumer) await(t *testing.T, what string, cond func(recs []*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(c.recs) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %d records consumed: %s", what, len(c.recs), describe(c.recs))
		}
		c.poll(t, 50*time.Millisecond)
	}
	return c.recs
}

// awaitIDs polls until every id in want has been consumed.
func (c *consumer) awaitIDs(t *testing.T, want []string) []*kgo.Record {
	t.Helper()
	return c.await(t, fmt.Sprintf("%d records", len(want)), func(recs []*kgo.Record) bool {
		seen := map[string]bool{}
		for _, r := range recs {
			seen[header(r, handlers.HeaderID)] = true
		}
		for _, id := range want {
			if !seen[id] {
				return false
			}
		}
		return true
	})
}

// header returns the value of a record's header, "" when it has none of that key.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// idNum is a record id as a number, for comparisons; the beginning ("") is 0.
var idNum = sinktest.IDNum

// requireOrderedPerKey checks what a consumer read: every id in want is there, all records of a key are
// in one partition, and per key each record was written for the first time after every record before it.
// It returns how many records were copies (see sinktest.RequireOrderedPerKey).
func requireOrderedPerKey(t *testing.T, recs []*kgo.Record, want []string) (duplicates int) {
	t.Helper()
	return sinktest.RequireOrderedPerKey(t, sent(recs), want, sinktest.OrderOpts{OnePlace: true})
}

func describe(recs []*kgo.Record) string { return sinktest.Describe(sent(recs)) }

// sent is what the consumer read, as sinktest sees it: key, id and partition.
func sent(recs []*kgo.Record) []sinktest.Sent {
	out := make([]sinktest.Sent, len(recs))
	for i, r := range recs {
		out[i] = sinktest.Sent{Key: string(r.Key), ID: header(r, handlers.HeaderID), Place: strconv.Itoa(int(r.Partition))}
	}
	return out
}
