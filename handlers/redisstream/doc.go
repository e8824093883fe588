// Package redisstream is a sink that adds each record to a Redis stream with XADD, using go-redis, and
// lets the position move past a record only once Redis has answered with the entry's id.
//
// The package is named for Redis Streams rather than redis so that it does not clash with go-redis's own
// package name, redis, in the files that use both.
//
// # Entries
//
// Each inorder record becomes one stream entry, with these fields in this order:
//
//	id           the record's id column as text
//	process      the name of the process that produced it
//	created_at   the record's created_at column in UTC, as time.RFC3339Nano
//	key          the record's key (the process's key column), left out when it has none
//	event_type   the record's type column (Config.TypeColumn; by default type, or event_type when it
//	             has no type column), left out when it has none or it is NULL
//	data         the value of the payload column (Config.PayloadColumn, "payload" unless set): a json or
//	             jsonb value or a string as its bytes, a bytea value as is, any other value as its JSON
//	             encoding, left out when NULL; a record without that column is sent whole, as one JSON
//	             object with its columns in their selected order, as the Kafka and Pub/Sub sinks send it
//	traceparent  the W3C trace context of the XADD's span, and tracestate when it has one: when the
//	             delivery is traced or the row carries a trace context (see processor's "Tracing")
//
// Each XADD is a producer span "send <stream>", a child of the delivery attempt's, when the processor
// records spans. The entry's id is the one Redis gives it (its clock in milliseconds and a sequence).
//
// # Streams
//
// Config.Stream names the stream. With "{key}" in it (handlers.KeyPlaceholder), each key has a stream of its
// own: "orders:{key}" puts the records of key 42 in the stream orders:42, and a record without a key in
// orders: (the placeholder empty). Without it, every record goes to that one stream, with its key in the key
// field. XADD creates a stream that does not exist yet. With Config.MaxLen each XADD trims its stream to
// about that many entries (MAXLEN ~ n, whole nodes of old entries at a time, so a stream may hold somewhat
// more); entries trimmed away are gone for consumers that had not read them.
//
// # Ordering
//
// Handle adds one record and returns once Redis answered, so the processor delivers one record at a time, in
// (created_at, id) order. With processor.Config.MaxInFlight above 1 (the CLI's --redis-max-in-flight) the
// processor's keyed window calls Handle for records of different keys at once, and still for the records of
// one key one at a time, each after Redis answered for the one before it. The handler sends one pipeline at a
// time: the XADDs that arrive while one is on the wire go together in the next, one write and one read for
// all of them. Redis runs commands one after another, so the entries of a key are in their stream in order
// whatever the window: in a stream of its own, or, with one stream, interleaved with other keys' entries in
// the order Redis ran them. A record without a key waits for everything before it and holds everything after
// it. A consumer that reads the stream with XREAD or XREADGROUP sees the entries in that order; with a
// consumer group, entries of one key handed to different consumers may of course be processed out of order.
//
// # Acknowledgements and the position
//
// The processor moves the position past a record only after Handle returned nil for it and for every
// record before it, so a record behind the position is always in its stream. Redis acknowledges a write
// once it is in memory: whether it survives a crash of Redis is the server's persistence (appendonly and
// appendfsync) and replication; a command such as WAITAOF is not issued.
//
// The reverse does not hold, and delivery is at least once. Redis has no deduplication of stream entries, so
// what inorder delivers again is added again, after its first copy: with a window, the records after the
// durable position when a processor stops, crashes or loses its database connection (at most the window; one
// at a time, a crash or a lost connection only), records of other keys that had succeeded after a record that
// failed in the window, and a record whose Handle gave up on ctx while its XADD was on the wire (one still
// queued for the next pipeline is not sent). Each copy is named by its id and process fields; consumers that
// must not act twice drop duplicates by them. Within a key, a copy is always behind its first copy, and no
// later record of the key is written before a record's first copy.
//
// The handler does not give entries ids of its own to make the XADD idempotent. Redis refuses an XADD
// whose id is not above the stream's last, which would turn a redelivery into a refusal; but with one
// stream for every key, the records of different keys in a window reach Redis in any order, so a record
// would be refused for a later record of another key and be lost, and an id derived from (created_at, id)
// works only for integer ids and gives the entry a time that is not when it was added (which MINID
// trimming and readers by time rely on).
//
// # Failures
//
// The refusals of Redis are the record's or the sink's:
//
//	refusal                                        per-key streams       one stream
//	NOAUTH, WRONGPASS (credentials)                Unavailable           Unavailable
//	"Protocol error: unauthenticated ..."          Unavailable           Unavailable
//	NOPERM (the user's ACL)                        Unavailable           Unavailable
//	READONLY (the address is a replica)            Unavailable           Unavailable
//	LOADING, MASTERDOWN, CLUSTERDOWN, OOM,         Unavailable           Unavailable
//	max clients
//	connection refused, reset or closed            Unavailable           Unavailable
//	WRONGTYPE (the stream's key is not a stream)   Permanent (record's)  Unavailable
//	a payload the row cannot encode                Permanent (record's)  Permanent (record's)
//	anything else, a timeout                       retried               retried
//
// An Unavailable refusal (handlers.Unavailable) is an outage of the sink: the processor waits and retries
// with backoff and flows again by itself once Redis accepts, without halting the stream or parking a key.
// A Permanent one (handlers.Permanent) halts the stream on the record, retried at the longest backoff
// only, until an operator fixes its stream (deletes the key) or skips the record.
//
// # Timeouts
//
// Handle returns when its context ends (the processor's HandlerTimeout) only if the client applies
// contexts to its reads and writes: create it with redis.Options.ContextTimeoutEnabled, as the CLI does.
// Otherwise a command waits for the client's ReadTimeout and retries (MaxRetries) whatever the context.
// A command the client retries after a lost connection may have been run once already: it is then added
// twice, both copies before the key's next record.
//
// # Start-up
//
// Check pings the server and, with one stream, checks that its key is a stream or does not exist yet. The
// CLI runs it before the processor starts, so that a wrong address or password fails at once with the
// address in the message.
package redisstream
