package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
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
	db      *processortest.DB
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
	return &bundle{cluster: c, client: newClient(t, c, clientOpts...), db: db}
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

// runOpts tune the processor run starts.
type runOpts struct {
	maxInFlight    int
	handlerTimeout time.Duration
	onHalt         processor.OnHalt
	tracerProvider trace.TracerProvider
}

// run starts a processor of process on the outbox with h until the test ends or the result's Stop.
func (b *bundle) run(t *testing.T, process string, h handlers.Handler[handlers.Row], o runOpts) *processortest.Running {
	t.Helper()
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:      inordertype.StartFromBeginning,
		Process:        process,
		ConnConfig:     b.db.ConnConfig(t),
		Source:         inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:        h,
		MaxInFlight:    o.maxInFlight,
		HandlerTimeout: o.handlerTimeout,
		OnHalt:         o.onHalt,
		TracerProvider: o.tracerProvider,
		PollInterval:   20 * time.Millisecond,
		RetryMin:       20 * time.Millisecond,
		RetryMax:       200 * time.Millisecond,
		Logger:         zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	require.NoError(t, err)
	return processortest.Start(t, p, nil)
}

// insert runs an INSERT ... RETURNING id and returns the ids as text.
func (b *bundle) insert(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}

// insertOutbox adds n rows in one statement, with payload {"n": from+i} and key k((from+i) mod keys) for
// i from 1 to n.
func (b *bundle) insertOutbox(t *testing.T, from, n, keys int) []string {
	t.Helper()
	return b.insert(t, `
		INSERT INTO outbox (aggregate_id, type, payload)
		SELECT 'k' || (g % $3), 'booking.created', jsonb_build_object('n', g)
		FROM generate_series($1 + 1, $1 + $2) g ORDER BY g RETURNING id`, from, n, keys)
}

// position returns the process's durable position id, "" at the beginning or before it has a cursor row.
func (b *bundle) position(t *testing.T, process string) string {
	t.Helper()
	var pos *string
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT position_id FROM inorder.position WHERE process_name = $1", process).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) || pos == nil {
		return ""
	}
	require.NoError(t, err)
	return *pos
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
			seen[header(r, kafka.HeaderID)] = true
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
func idNum(t *testing.T, id string) int64 {
	t.Helper()
	if id == "" {
		return 0
	}
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, "record id %q", id)
	return n
}

// requireOrderedPerKey checks what a consumer read: every id in want is there, all records of a key are
// in one partition, and per key each record was written for the first time after every record before it
// (copies written again by a redelivery are allowed, a first copy out of order is not). It returns how
// many records were copies.
func requireOrderedPerKey(t *testing.T, recs []*kgo.Record, want []string) (duplicates int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}      // key -> highest id first written so far
	partition := map[string]int32{} // key -> its partition
	for i, r := range recs {
		id := header(r, kafka.HeaderID)
		if p, ok := partition[string(r.Key)]; ok && r.Key != nil {
			require.Equal(t, p, r.Partition, "record %d (id %s): key %q in two partitions", i, id, r.Key)
		}
		partition[string(r.Key)] = r.Partition
		if seen[id] {
			duplicates++
			continue
		}
		seen[id] = true
		n := idNum(t, id)
		if prev, ok := last[string(r.Key)]; ok {
			require.Greater(t, n, prev, "record %d: id %s on key %q first written after id %d: %s",
				i, id, r.Key, prev, describe(recs))
		}
		last[string(r.Key)] = n
	}
	var missing []string
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "records never written")
	return duplicates
}

func describe(recs []*kgo.Record) string {
	var b strings.Builder
	for i, r := range recs {
		if i == 200 {
			fmt.Fprintf(&b, "... (%d more)", len(recs)-i)
			break
		}
		fmt.Fprintf(&b, "%s/%d/%s ", r.Key, r.Partition, header(r, kafka.HeaderID))
	}
	return b.String()
}
