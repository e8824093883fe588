// Package rabbitmq is a sink that publishes each record to a RabbitMQ exchange with
// github.com/rabbitmq/amqp091-go, with publisher confirms and the mandatory flag, and lets the position
// move past a record only once the broker has confirmed it.
//
// # Messages
//
// Each record becomes one persistent message (delivery mode 2) published to Config.Exchange with the
// mandatory flag. Its routing key is the record's key (the process's key column, aggregate_id by
// default), or Config.RoutingKey for every record when that is set. Its body is the value of the payload
// column (Config.PayloadColumn, "payload" unless set) as the Kafka sink sends it: a json or jsonb value
// or a string as its bytes, a bytea value as is, and any other value as its JSON encoding; a record
// without that column is sent whole, as one JSON object.
//
// Its properties:
//
//	message_id     "<process>:<id>", the same for every delivery of the record
//	delivery_mode  2, persistent: a durable queue keeps it across a restart of the broker
//	timestamp      the record's created_at column (AMQP keeps seconds)
//	type           the record's type column (Config.TypeColumn; by default type, or event_type)
//	app_id         "inorder"
//
// and its headers, the Kafka sink's:
//
//	inorder_id          the record's id column as text
//	inorder_process     the name of the process that produced it
//	inorder_created_at  the record's created_at column in UTC, as time.RFC3339Nano
//	event_type          the record's type column, left out when it has none or it is NULL
//	traceparent         the W3C trace context of the publish's span, and tracestate when it has one
//
// # Ordering
//
// Handle publishes one record and returns once the broker confirmed it, so the processor delivers one
// record at a time, in (created_at, id) order. With processor.Config.MaxInFlight above 1 (the CLI's
// --rabbitmq-max-in-flight) the processor's keyed window calls Handle for records of different keys at
// once, and still for the records of one key one at a time, each after the one before it was confirmed.
// All publishes go out on one channel in confirm mode, and the broker confirms a channel's publishes in
// the order they were sent.
//
// RabbitMQ keeps the order of the messages one channel publishes into one queue; a consumer sees them in
// that order as long as it is the queue's only consumer. So to keep the order of a key to the consumer:
//
//	a queue per key          a direct exchange (or the default exchange) and the key as routing key:
//	                         the records of a key in their queue, in order
//	one queue, one consumer  any exchange routing every record to a queue declared with
//	                         x-single-active-consumer: true, so that one consumer at a time reads it,
//	                         in order; a standby takes over where it stopped
//	a queue per shard        the consistent-hash exchange plugin, the key as routing key, one
//	                         single-active-consumer queue per shard
//
// Competing consumers on one queue, a consumer that rejects and requeues, or queues with priorities do not
// keep the order. A record without a key waits for everything before it and holds everything after it.
//
// # Confirms and the position
//
// The processor moves the position past a record only after Handle returned nil for it and for every
// record before it, so a record behind the position is always in every queue the exchange routed it to:
// RabbitMQ confirms a persistent message once the queues have it on disk (a quorum queue: a majority of
// its replicas). The reverse does not hold, and delivery is at least once: the records after the durable
// position when a processor crashes or stops (at most the window), records of other keys that were
// confirmed after a record that failed in the window, and a record whose Handle gave up on ctx while the
// broker still had it are published again, after their first copy. A consumer that must not act twice
// drops a message whose message_id it has seen.
//
// # Failures
//
// A record the exchange does not route anywhere (no queue bound for its routing key) is returned by the
// broker and then confirmed; Handle fails on it, never drops it. It is the sink's refusal
// (handlers.Unavailable: the stream waits until a queue is bound, and flows again by itself) when the
// exchange routes nothing at all: with Config.RoutingKey every record has the same routing key, so one
// return is every record's; with the record's key, while the exchange has routed none of this handler's
// records. Once it has routed one, a record it returns is the record's own refusal (handlers.Permanent,
// naming the routing key: bind a queue for it, or skip the record).
//
// Also the sink's: a connection that cannot be made, credentials or a virtual host the broker refuses,
// an exchange that does not exist (the broker closes the channel with 404 NOT_FOUND), a user without
// the right to write to it (403 ACCESS_REFUSED), and a broker that blocks publishers (connection.blocked,
// during a memory or disk alarm). CheckExchange looks the exchange up at start, so that a
// wrong name stops the start instead.
//
// The record's own: a body larger than the broker's max_message_size (the broker closes the channel with
// 406 PRECONDITION_FAILED; the other records in flight on that channel fail with it and are retried), a
// key longer than the 255 bytes of a routing key, and a payload that cannot be encoded. A basic.nack (a
// queue could not take the message) and a lost connection are retried: the handler connects again on the
// next record.
//
// # Tests
//
// The caller gives the URL of a broker. This package's tests and example run against a throwaway node of
// the rabbitmq-server package (internal/harness/rabbitmqtest), and skip when it is not installed.
package rabbitmq
