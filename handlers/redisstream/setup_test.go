package redisstream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/internal/harness/redistest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

func TestMain(m *testing.M) { processortest.Main(m) }

const outboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text,
		type         text NOT NULL,
		payload      jsonb,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON outbox (created_at, id);`

// bundle is what most tests work with: a throwaway Redis server, a client on it, and a database with
// the outbox table.
type bundle struct {
	server *redistest.Server
	client *redis.Client
	sinktest.Outbox
}

// setup starts a Redis server (skipping the test when redis-server is not installed), a client with
// contexts applied to its reads and writes, and a database with the outbox table.
func setup(t *testing.T, args ...string) *bundle {
	t.Helper()
	s := redistest.StartT(t, redistest.Config{Args: args})
	db := processortest.NewDB(t, nil)
	db.Exec(t, outboxDDL)
	sinktest.AddClock(t, db, "outbox")
	return &bundle{server: s, client: newClient(t, s, ""), Outbox: sinktest.Outbox{DB: db}}
}

// newClient returns a client of s with the given password, closed when the test ends.
func newClient(t *testing.T, s *redistest.Server, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: password, ContextTimeoutEnabled: true,
		PoolSize: 64, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newHandler returns a handler on the bundle's client.
func (b *bundle) newHandler(t *testing.T, cfg redisstream.Config) *redisstream.Handler {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = b.client
	}
	h, err := redisstream.New(cfg)
	require.NoError(t, err)
	return h
}

// entries reads every entry of the streams matching pattern, stream by stream, each in its order.
func (b *bundle) entries(t *testing.T, pattern string) map[string][]redis.XMessage {
	t.Helper()
	ctx := context.Background()
	keys, err := b.client.Keys(ctx, pattern).Result()
	require.NoError(t, err)
	out := map[string][]redis.XMessage{}
	for _, k := range keys {
		msgs, err := b.client.XRange(ctx, k, "-", "+").Result()
		require.NoError(t, err, "XRANGE %s", k)
		out[k] = msgs
	}
	return out
}

// field returns the value of an entry's field, "" when it has none.
func field(m redis.XMessage, name string) string {
	s, _ := m.Values[name].(string)
	return s
}

// idNum is a record id as a number, for comparisons; the beginning ("") is 0.
var idNum = sinktest.IDNum

// requireOrderedPerKey checks the entries of streams: every id in want is there, and per stream and key
// (the key field) each record was added for the first time after every record before it. It returns how
// many entries were copies (see sinktest.RequireOrderedPerKey).
func requireOrderedPerKey(t *testing.T, streams map[string][]redis.XMessage, want []string) (duplicates int) {
	t.Helper()
	var all []sinktest.Sent
	for stream, msgs := range streams {
		all = append(all, sent(stream, msgs)...)
	}
	return sinktest.RequireOrderedPerKey(t, all, want, sinktest.OrderOpts{})
}

// count is the number of entries in streams.
func count(streams map[string][]redis.XMessage) int {
	n := 0
	for _, msgs := range streams {
		n += len(msgs)
	}
	return n
}

func describe(msgs []redis.XMessage) string { return sinktest.Describe(sent("", msgs)) }

// sent is a stream's entries as sinktest sees them: key, id and the stream.
func sent(stream string, msgs []redis.XMessage) []sinktest.Sent {
	out := make([]sinktest.Sent, len(msgs))
	for i, m := range msgs {
		out[i] = sinktest.Sent{Key: field(m, redisstream.FieldKey), ID: field(m, redisstream.FieldID), Place: stream}
	}
	return out
}
