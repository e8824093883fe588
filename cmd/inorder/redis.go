package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/redisstream"
)

// redisCheckTimeout bounds the start-up check of --handler redis (a ping, and the type of a fixed stream).
const redisCheckTimeout = 10 * time.Second

// redisFlags are the flags of `inorder run --handler redis`.
type redisFlags struct {
	url           string
	stream        string
	maxLen        int64
	payloadColumn string
	typeColumn    string
	maxInFlight   int
	envelope      *cloudevent.Envelope // from --envelope, set by runFlags.newHandler
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "redis-url", "", "redis: server as redis://[user:password@]host:port[/db] (rediss:// for TLS); "+
		"INORDER_REDIS_URL keeps the password off the command line")
	fs.StringVar(&r.stream, "redis-stream", "", "redis: stream records are added to; {key} in it gives each key a stream of its own "+
		"(orders:{key}), else the key is a field of one stream")
	fs.Int64Var(&r.maxLen, "redis-maxlen", 0, "redis: trim each stream to about N entries as records are added (XADD MAXLEN ~ N); 0 keeps every entry")
	fs.StringVar(&r.payloadColumn, "redis-payload-column", handlers.DefaultPayloadColumn, "redis: column sent as the entry's data field (whole record as JSON without it)")
	fs.StringVar(&r.typeColumn, "redis-type-column", "", "redis: column sent in the event_type field (default type, else event_type)")
	fs.IntVar(&r.maxInFlight, "redis-max-in-flight", 1, "redis: records added at once, in order per key (records of one key one at a time)")
}

// set reports whether any --redis-* flag differs from its default.
func (r *redisFlags) set() bool {
	return r.url != "" || r.stream != "" || r.maxLen != 0 || r.payloadColumn != handlers.DefaultPayloadColumn ||
		r.typeColumn != "" || r.maxInFlight != 1
}

// newHandler checks the flags, connects and checks the server, and returns the Redis Streams handler and a
// function that closes its client.
func (r *redisFlags) newHandler(ctx context.Context) (handlers.Handler[handlers.Row], func(), error) {
	if r.url == "" {
		return nil, nil, usageErr("--handler redis needs --redis-url (redis://host:port)")
	}
	if r.stream == "" {
		return nil, nil, usageErr("--handler redis needs --redis-stream (a stream, or a template with {key})")
	}
	if r.maxInFlight < 1 {
		return nil, nil, usageErr("--redis-max-in-flight must be at least 1, got %d", r.maxInFlight)
	}
	if r.maxLen < 0 {
		return nil, nil, usageErr("--redis-maxlen must not be negative, got %d", r.maxLen)
	}
	opts, err := redis.ParseURL(r.url)
	if err != nil {
		// The URL may hold a password: name the flag, not the value.
		return nil, nil, usageErr("--redis-url is not a redis:// or rediss:// URL (redis://[user:password@]host:port[/db])")
	}
	// Commands end with the handler's context (the processor's handler timeout).
	opts.ContextTimeoutEnabled = true
	redis.SetLogger(quietRedisLog{})
	opts.ClientName = "inorder"
	client := redis.NewClient(opts)
	h, err := redisstream.New(redisstream.Config{Client: client, Stream: r.stream, MaxLen: r.maxLen,
		PayloadColumn: namedColumn(r.payloadColumn, handlers.DefaultPayloadColumn), TypeColumn: r.typeColumn,
		Envelope: r.envelope})
	if err != nil {
		_ = client.Close()
		return nil, nil, usageErr("%v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	if err := h.Check(cctx); err != nil {
		_ = client.Close()
		msg := fmt.Sprintf("redis at %s (--redis-url): %v", opts.Addr, err)
		if u, ok := handlers.UnavailableOf(err); ok && u.Check != "" {
			msg += "; check " + u.Check
		}
		return nil, nil, fmt.Errorf("%s", oneLineText(msg))
	}
	return h, func() { _ = client.Close() }, nil
}

// quietRedisLog drops go-redis's own log lines (a dial that failed, a connection that was closed): the
// handler's errors say the same, in the stream's state and its log.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
