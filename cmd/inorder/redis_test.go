package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/redisstream"
	"github.com/inorder-dev/inorder/internal/harness/redistest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
)

// TestRedisFlagsGetOneClearLine checks that every wrong use of the Redis flags, and a server that cannot be
// used, is refused with one line naming the flag or the address, before any position moves.
func TestRedisFlagsGetOneClearLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	s := redistest.StartT(t, redistest.Config{Args: []string{"--requirepass", "secret"}})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "secret"})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Set(context.Background(), "taken", "a string", 0).Err())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nowhere := l.Addr().String()
	require.NoError(t, l.Close())
	good := "redis://:secret@" + s.Addr()

	redisArgs := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "redis", "--redis-url", good, "--redis-stream", "orders:{key}"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no url", runArgs("--handler", "redis", "--redis-stream", "s"), 2,
			"inorder run: --handler redis needs --redis-url (redis://host:port)"},
		{"no stream", runArgs("--handler", "redis", "--redis-url", good), 2, "--handler redis needs --redis-stream"},
		{"not a url", redisArgs("--redis-url", "http://:secret@x"), 2, "--redis-url is not a redis:// or rediss:// URL"},
		{"two placeholders", redisArgs("--redis-stream", "{key}{key}"), 2, `has {key} 2 times`},
		{"window below one", redisArgs("--redis-max-in-flight", "0"), 2, "--redis-max-in-flight must be at least 1, got 0"},
		{"negative maxlen", redisArgs("--redis-maxlen", "-5"), 2, "--redis-maxlen must not be negative, got -5"},
		{"redis flags with stdout", runArgs("--redis-stream", "s"), 2, "--redis-* flags need --handler redis"},
		{"webhook flags with redis", redisArgs("--webhook-url", "http://x"), 2, "--webhook-* and --pubsub-* flags contradict --handler redis"},
		{"nothing listens", redisArgs("--redis-url", "redis://"+nowhere), 1,
			"redis at " + nowhere + " (--redis-url): redisstream: ping: dial tcp " + nowhere},
		{"no password", redisArgs("--redis-url", "redis://"+s.Addr()), 1, "redis at " + s.Addr() + " (--redis-url): redisstream: ping: NOAUTH"},
		{"wrong password", redisArgs("--redis-url", "redis://:wrong@"+s.Addr()), 1, "WRONGPASS"},
		{"one stream of another type", redisArgs("--redis-stream", "taken"), 1,
			`redis at ` + s.Addr() + ` (--redis-url): redisstream: key "taken" holds a string, not a stream; check the stream "taken"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, b.env, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "secret", "the password is never printed")
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
	require.Empty(t, b.position(t), "no position moved")
}

// TestRunRelaysToRedisAcrossTwoSIGKILLs runs the binary with --handler redis, a stream per key and a
// window of 32 over 40 keys, behind a proxy that adds latency so that the window fills; it kills it with
// SIGKILL a third of the way in, kills the next one two thirds in, and lets a third finish. Read back with
// XRANGE: every record is there, first copies in order per key, each copy of a redelivered record named by
// its id field and behind its first copy, and each kill added again at most the window.
func TestRunRelaysToRedisAcrossTwoSIGKILLs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := redistest.StartT(t, redistest.Config{})
	proxy, err := tcpproxy.Start(tcpproxy.Config{Target: s.Addr(), Delay: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })

	const total, keys, window = 1200, 40, 32
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount, details)
		SELECT 'customer-' || (g %% %d), 1, jsonb_build_object('seats', g) FROM generate_series(1, %d) g`, keys, total))
	args := runArgs("--handler", "redis", "--redis-url", "redis://"+proxy.Addr(), "--redis-stream", "orders:{key}",
		"--redis-max-in-flight", strconv.Itoa(window))
	ctx := context.Background()
	added := func() int {
		pipe := c.Pipeline()
		lens := make([]*redis.IntCmd, keys)
		for k := range keys {
			lens[k] = pipe.XLen(ctx, fmt.Sprintf("orders:customer-%d", k))
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		n := 0
		for _, l := range lens {
			n += int(l.Val())
		}
		return n
	}

	var logs []string
	for _, stopAt := range []int{total / 3, 2 * total / 3} {
		p := startBinary(t, b.env, args...)
		require.Eventually(t, func() bool { return added() >= stopAt }, 30*time.Second, 2*time.Millisecond, p.logs())
		require.NoError(t, p.cmd.Process.Kill()) // mid-window: XADDs in flight, no chance to unlock
		p.wait(t)
		logs = append(logs, p.logs())
	}
	last := startBinary(t, b.env, args...)
	require.Eventually(t, func() bool { return b.position(t) == strconv.Itoa(total) }, 30*time.Second, 10*time.Millisecond,
		"%s\n%s", strings.Join(logs, "\n"), last.logs())

	// Read back with the broker's client.
	firsts, copies := 0, 0
	for k := range keys {
		stream := fmt.Sprintf("orders:customer-%d", k)
		msgs, err := c.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		seen := map[int64]bool{}
		var lastID int64
		for i, m := range msgs {
			id, err := strconv.ParseInt(m.Values[redisstream.FieldID].(string), 10, 64)
			require.NoError(t, err)
			require.Equal(t, "booking_sms", m.Values[redisstream.FieldProcess])
			require.Equal(t, fmt.Sprintf("customer-%d", k), m.Values[redisstream.FieldKey])
			require.Contains(t, m.Values[redisstream.FieldData], fmt.Sprintf(`"seats":%d`, id), "the whole row as data")
			if seen[id] {
				copies++ // a redelivery, named by its id: behind its first copy
				require.LessOrEqual(t, id, lastID, "%s entry %d", stream, i)
				continue
			}
			seen[id] = true
			require.Greater(t, id, lastID, "%s entry %d: record %d first added after record %d", stream, i, id, lastID)
			require.Equal(t, int64(k), id%keys, "record %d in the stream of its key", id)
			lastID = id
			firsts++
		}
	}
	require.Equal(t, total, firsts, "every record added")
	require.LessOrEqual(t, copies, 2*window, "each SIGKILL adds again at most the window")
	t.Logf("%d records over %d keys, window %d: %d added again after two SIGKILLs", total, keys, window, copies)
}
