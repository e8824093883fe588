package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/redistest"
	"github.com/inorder-dev/inorder/processor"
)

// Sizes of the Redis Streams measures.
const (
	redisKeys     = 64     // aggregates (streams, one per key) the outbox is spread over
	redisRowsOne  = 10000  // one record in flight
	redisRowsMany = 100000 // 64 in flight
	redisInFlight = 64
)

// redisLines are the Redis Streams lines of the table: raw go-redis to redis-server, then inorder beside it.
func redisLines() []line {
	return []line{
		{key: "redis_raw1", label: "go-redis XADD to redis-server, 1 client, sync", limit: true},
		{key: "redis_raw64", label: "go-redis XADD to redis-server, 64 clients, sync", limit: true},
		{key: "redis1", label: "inorder redis to redis-server, in flight 1", ref: "redis_raw1", refLabel: "go-redis, 1 client"},
		{key: "redis64", label: "inorder redis to redis-server, in flight 64", ref: "redis_raw64", refLabel: "go-redis, 64 clients"},
	}
}

// redisNote is the footnote on the Redis Streams lines.
func redisNote(note func(format string, args ...any)) {
	note("redis: a throwaway redis-server (Debian's package, no persistence) on loopback, a stream per key (XADD, "+
		"answered from memory); the outbox spread over %d keys, %s rows with one in flight and %s with %d; inorder "+
		"with checkpoint batch and BatchSize 1000, the handler adding each record synchronously, the keyed window "+
		"making %d at once, pipelined (what arrives while a pipeline is on the wire goes in the next). The "+
		"references are plain go-redis goroutines adding the same "+
		"entries to the same server: one, and %d each adding its share one entry after another, with no database.",
		redisKeys, thousands(redisRowsOne), thousands(redisRowsMany), redisInFlight, redisInFlight, redisInFlight)
}

// newRedis starts a server and returns a client on it with a connection for each record in flight.
func newRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	s := redistest.StartT(tb, redistest.Config{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, PoolSize: redisInFlight + 8})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// redisStored is how many entries the server holds in the bench streams.
func redisStored(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	ctx := context.Background()
	pipe := c.Pipeline()
	lens := make([]*redis.IntCmd, redisKeys)
	for k := range redisKeys {
		lens[k] = pipe.XLen(ctx, "bench:k"+strconv.Itoa(k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("XLEN: %v", err)
	}
	var n int64
	for _, l := range lens {
		n += l.Val()
	}
	return n
}

// measureRedisRaw adds n entries like the handler's (the same fields, a small JSON value) to the stream of
// their key with clients goroutines, each adding its share one entry at a time and waiting for each.
func measureRedisRaw(tb testing.TB, clients, n int) result {
	c := newRedis(tb)
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for p := range clients {
		wg.Go(func() {
			for g := p; g < n; g += clients { // entries p, p+clients, ...: this client's share
				key := "k" + strconv.Itoa(g%redisKeys)
				err := c.XAdd(ctx, &redis.XAddArgs{Stream: "bench:" + key, Values: []string{
					redisstream.FieldID, strconv.Itoa(g), redisstream.FieldProcess, "bench",
					redisstream.FieldCreatedAt, time.Now().UTC().Format(time.RFC3339Nano), redisstream.FieldKey, key,
					redisstream.FieldEventType, "booking.created",
					redisstream.FieldData, fmt.Sprintf(`{"booking":%d,"seats":2,"status":"created"}`, g)}}).Err()
				if err != nil {
					tb.Errorf("XADD: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if got := redisStored(tb, c); got != int64(n) {
		tb.Fatalf("redis holds %d entries, want %d", got, n)
	}
	return result{n: n, elapsed: elapsed}
}

// measureRedis drains an outbox of n rows (jsonb payload, redisKeys keys) through the Redis Streams
// handler with inFlight records at once, 1000-record batches and a checkpoint per batch.
func measureRedis(tb testing.TB, inFlight, n int) result {
	db := pgtest.New(tb)
	insertOutbox(tb, db, n, redisKeys)
	lastID, lastAt := lastRow(tb, db, "outbox")
	noteServer(tb, db.Pool)

	c := newRedis(tb)
	h, err := redisstream.New(redisstream.Config{Client: c, Stream: "bench:{key}"})
	if err != nil {
		tb.Fatalf("redis handler: %v", err)
	}
	res := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     fmt.Sprintf("bench_redis_%d", inFlight),
		Source:      inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		BatchSize:   1000,
		Checkpoint:  processor.CheckpointBatch,
	}, n, lastID, lastAt, 3*time.Minute)
	if got := redisStored(tb, c); got != int64(n) { // nothing failed, so nothing was added twice
		tb.Fatalf("redis holds %d entries, want %d", got, n)
	}
	return res
}

func BenchmarkRedis(b *testing.B) {
	b.Run("raw1", func(b *testing.B) {
		record(b, "redis_raw1", measureRedisRaw(b, 1, redisRowsOne))
	})
	b.Run("inflight1", func(b *testing.B) {
		record(b, "redis1", measureRedis(b, 1, redisRowsOne))
	})
	b.Run("raw64", func(b *testing.B) {
		record(b, "redis_raw64", measureRedisRaw(b, redisInFlight, redisRowsMany))
	})
	b.Run("inflight64", func(b *testing.B) {
		record(b, "redis64", measureRedis(b, redisInFlight, redisRowsMany))
	})
}

// TestRedisMeasures runs the Redis Streams measures on a few rows, so that the benchmark keeps working.
// It records no figures.
func TestRedisMeasures(t *testing.T) {
	for name, r := range map[string]result{
		"raw1":       measureRedisRaw(t, 1, 20),
		"raw64":      measureRedisRaw(t, redisInFlight, 300),
		"inflight1":  measureRedis(t, 1, 20),
		"inflight64": measureRedis(t, redisInFlight, 300),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
}
