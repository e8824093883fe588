package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/redistest"
	"github.com/inorder-dev/inorder/processor"
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
	db     *processortest.DB
}

// setup starts a Redis server (skipping the test when redis-server is not installed), a client with
// contexts applied to its reads and writes, and a database with the outbox table.
func setup(t *testing.T, args ...string) *bundle {
	t.Helper()
	s := redistest.StartT(t, redistest.Config{Args: args})
	db := processortest.NewDB(t, nil)
	db.Exec(t, outboxDDL)
	return &bundle{server: s, client: newClient(t, s, ""), db: db}
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

// runOpts tune the processor run starts.
type runOpts struct {
	maxInFlight    int
	tracerProvider trace.TracerProvider
}

// run starts a processor of process on the outbox with h until the test ends.
func (b *bundle) run(t *testing.T, process string, h handlers.Handler[handlers.Row], o runOpts) *processortest.Running {
	t.Helper()
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:      inordertype.StartFromBeginning,
		Process:        process,
		ConnConfig:     b.db.ConnConfig(t),
		Source:         inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:        h,
		MaxInFlight:    o.maxInFlight,
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
func idNum(t *testing.T, id string) int64 {
	t.Helper()
	if id == "" {
		return 0
	}
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, "record id %q", id)
	return n
}

// requireOrderedPerKey checks the entries of streams: every id in want is there, and per key (the key
// field) each record was added for the first time after every record before it (copies added again by a
// redelivery are allowed, a first copy out of order is not). It returns how many entries were copies.
func requireOrderedPerKey(t *testing.T, streams map[string][]redis.XMessage, want []string) (duplicates int) {
	t.Helper()
	seen := map[string]bool{}
	for stream, msgs := range streams {
		last := map[string]int64{} // key -> highest id first added so far
		for i, m := range msgs {
			id, key := field(m, redisstream.FieldID), field(m, redisstream.FieldKey)
			if seen[id] {
				duplicates++
				continue
			}
			seen[id] = true
			n := idNum(t, id)
			if prev, ok := last[key]; ok {
				require.Greater(t, n, prev, "%s entry %d: id %s on key %q first added after id %d: %s",
					stream, i, id, key, prev, describe(msgs))
			}
			last[key] = n
		}
	}
	var missing []string
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "records never added")
	return duplicates
}

// count is the number of entries in streams.
func count(streams map[string][]redis.XMessage) int {
	n := 0
	for _, msgs := range streams {
		n += len(msgs)
	}
	return n
}

func describe(msgs []redis.XMessage) string {
	var b strings.Builder
	for i, m := range msgs {
		if i == 200 {
			fmt.Fprintf(&b, "... (%d more)", len(msgs)-i)
			break
		}
		fmt.Fprintf(&b, "%s/%s ", field(m, redisstream.FieldKey), field(m, redisstream.FieldID))
	}
	return b.String()
}
