// Package jetstream is a sink that publishes each record to a NATS JetStream stream with nats.go's
// jetstream package, and lets the position move past a record only once the stream has acknowledged it
// (its PubAck). The package is named for JetStream rather than NATS because what it relies on (an
// acknowledgement from a stream, and the stream's deduplication by message id) is JetStream's: a core
// NATS publish has neither. The CLI calls it --handler nats, with --nats-* flags.
//
// # Messages
//
// Each inorder record becomes one NATS message. Its data is the value of the payload column
// (Config.PayloadColumn, "payload" unless set): a json or jsonb value or a string as its bytes, a bytea
// value as is, NULL as empty data, and any other value as its JSON encoding. A record without that column
// is sent whole, as one JSON object with its columns in their selected order, the form the stdout sink
// prints. This is what the Kafka sink sends as a record's value.
//
// Every message carries these headers:
//
//	Nats-Msg-Id         the record's process and id, "process:id": the same for every delivery
//	                    of the record, so that the stream drops a copy within its duplicate window
//	inorder_id          the record's id column as text
//	inorder_process     the name of the process that produced it
//	inorder_created_at  the record's created_at column in UTC, as time.RFC3339Nano
//	inorder_key         the record's key (the process's key column), left out when it has none
//	event_type          the record's type column (Config.TypeColumn; by default type, or event_type
//	                    when it has no type column), left out when it has none or it is NULL
//	traceparent         the W3C trace context of the publish's span, and tracestate when it has one:
//	                    when the delivery is traced or the row carries a trace context (see
//	                    processor's "Tracing"); a consumer's propagator continues the trace from it
//
// Each publish is a producer span "send <subject>", a child of the delivery attempt's, when the processor
// records spans.
//
// # Subjects
//
// Records go to Config.Subject. When it holds handlers.KeyPlaceholder ("{key}") as a whole token, each record
// goes to the subject with its key there: with "orders.{key}" the records of key 42 go to orders.42, and one
// stream capturing orders.* (or orders.>) holds them all. A record's key must then be one subject token: a
// record without a key, or whose key holds a '.', '*', '>', white space or a control character, halts the
// stream with a permanent error naming the key.
//
// The handler creates no stream. Handler.Check asks the server which stream captures the subject (for a
// subject with {key}, the subject with a wildcard in its place: orders.*), and says "no stream captures
// subject X" when none does; the CLI runs it at start and refuses to start without one.
//
// # Ordering
//
// Handle publishes one record and returns once the stream acknowledged it, so the processor delivers one
// record at a time, in (created_at, id) order. With processor.Config.MaxInFlight above 1 (the CLI's
// --nats-max-in-flight) the processor's keyed window calls Handle for records of different keys at once,
// and still for the records of one key one at a time, each after the one before it was acknowledged. So
// a key's records are stored in the stream in order whatever the window:
//
//	subject             what keeps a key's order for a consumer
//	orders.{key}        the key's own subject: a consumer filtering on orders.42 reads key 42 in order,
//	                    and one reading orders.> reads every key in order, the keys interleaved
//	orders (fixed)      the stream's sequence: every key's records in order, interleaved, the key in the
//	                    inorder_key header; a consumer that wants one key filters on the header
//
// Records of different keys are stored in the order their acknowledgements came, not in the table's
// order; with a window of 1 the stream's sequence is the table's order. A record without a key waits for
// everything before it and holds everything after it.
//
// # Acknowledgements, the position and duplicates
//
// The processor moves the position past a record only after Handle returned nil for it and for every
// record before it, so a record behind the position is always stored in its stream (replicated as the
// stream is configured). The reverse does not hold: a record can be stored and not yet behind the position
// when a processor stops, crashes or loses its database connection (at most the window), when a record
// of another key failed in the window, or when Handle gave up on its context while the server stored the
// message anyway. Those records are delivered again, with the same Nats-Msg-Id, and the stream drops
// every copy of a message id it stored within its duplicate window (the stream's duplicate_window, two
// minutes by default): the stream acknowledges it as a duplicate, Handle returns nil, and nothing is
// stored twice. Set the duplicate window longer than the longest time from a record's first publish to
// its delivery again: for a crash, the time until another instance takes the cursor over (the lease,
// --lease) or the crashed one is restarted. A copy that comes after the window is stored again; consumers
// that must never act twice can still drop it by its Nats-Msg-Id.
//
// The same deduplication drops a record delivered again on purpose within the window (a process
// rewound with inorder rewind): wait out the window, or publish to a new stream.
//
// # Failures
//
// A refusal that every record would meet is the sink's outage (handlers.Unavailable): the processor waits
// and retries with backoff while it lasts, flows again by itself once the sink accepts, and never halts
// the stream or parks a key for it. A refusal of one record halts the stream on it with a permanent error
// (handlers.Permanent), retried at the processor's longest backoff only, until an operator fixes the cause
// or skips the record. Everything else is retried with backoff.
//
//	refusal                                              kind
//	no stream captures the subject (no responders)       Unavailable, naming the subject
//	connection closed, no servers, authorization,        Unavailable
//	permissions violation
//	connection lost, publish not acknowledged in time    Unavailable
//	JetStream not enabled on the server or account       Unavailable
//	message over the server's max_payload                Permanent, with its size
//	message over the stream's max_msg_size               Permanent, with its size
//	key not a subject token, no key for a {key} subject  Permanent, naming the key
//	payload that cannot be encoded                       Permanent
//	anything else (a timeout on a connected client, a    retried
//	stream without a leader for a moment)
//
// With a subject per key, a key's subject that no stream captures is also the sink's outage: the server
// cannot tell a stream deleted for everyone from a subject captured for no one, and the stream waits
// until a stream captures it (the outage names the subject).
//
// # Timeouts
//
// Handle waits for the PubAck as long as its context allows (the processor's HandlerTimeout), and
// returns the context's error when it ends first. The message may still be stored then; delivered again,
// it is dropped as a duplicate. nats.go retries a publish that meets no responders twice, 250 ms apart,
// to ride out a stream changing leader.
//
// # Tests
//
// The caller connects and owns the connection. This package's tests, and the CLI's, run a real
// nats-server with JetStream (Debian's nats-server package), started on a free loopback port by
// internal/harness/natstest.
package jetstream
