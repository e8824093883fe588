// Package kafka is a sink that produces each record to Apache Kafka with franz-go, with the record's key
// as the Kafka record key, and lets the position move past a record only once the brokers have
// acknowledged it.
//
// # Records
//
// Each inorder record becomes one Kafka record. Its key is the record's key (the process's key column,
// aggregate_id by default), so every record of one key lands in one partition, chosen as Kafka's own
// Java producer chooses it (murmur2 of the key) unless the client is given another partitioner. A record
// without a key is produced without one. Its value is the value of the payload column
// (Config.PayloadColumn, "payload" unless set): a json or jsonb value or a string as its bytes, a bytea
// value as is, NULL as a null value (a tombstone on a compacted topic), and any other value as its JSON
// encoding. A record without that column is sent whole, as one JSON object with its columns in their
// selected order, the form the stdout sink prints. This is what the Pub/Sub sink sends as message data.
//
// Every Kafka record carries these headers, the same as the Pub/Sub sink's attributes:
//
//	inorder_id          the record's id column as text
//	inorder_process     the name of the process that produced it
//	inorder_created_at  the record's created_at column in UTC, as time.RFC3339Nano
//	event_type          the record's type column (Config.TypeColumn; by default type, or event_type
//	                    when it has no type column), left out when it has none or it is NULL
//	traceparent         the W3C trace context of the produce's span, and tracestate when it has one:
//	                    when the delivery is traced or the row carries a trace context (see
//	                    processor's "Tracing"); a consumer's propagator continues the trace from it
//
// Each produce is a producer span "send <topic>", a child of the delivery attempt's, when the processor
// records spans.
//
// The Kafka record's timestamp is the time it was produced, not created_at: a backlog of old rows would
// otherwise fall due for deletion under the topic's retention as soon as it was written.
//
// # Topics
//
// Records go to Config.Topic. With Config.TopicColumn each record's topic is the value of that column
// (an outbox's destination), and records where it is NULL or empty go to Config.Topic. Config.TopicFunc
// chooses the topic in code and takes precedence over both. The handler does not create topics; whether
// producing to a missing topic creates it is the brokers' auto.create.topics.enable and the client's
// kgo.AllowAutoTopicCreation.
//
// # Ordering
//
// Handle produces one record and returns once the brokers acknowledged it, so the processor delivers one
// record at a time, in (created_at, id) order. With processor.Config.MaxInFlight above 1 (the CLI's
// --kafka-max-in-flight) the processor's keyed window calls Handle for records of different keys at once,
// and still for the records of one key one at a time, each after the one before it was acknowledged. So
// the records of a key are written to their partition in order whatever the window, and franz-go gathers
// the records produced at once into batches. A record without a key waits for everything before it and
// holds everything after it; but keyless records may land in different partitions, and Kafka keeps no
// order across partitions. To keep a whole table in one order, give every record the same key or use a
// topic of one partition.
//
// The client must be an idempotent producer, which franz-go is by default and runs only with acks from
// all in-sync replicas: New refuses a client with DisableIdempotentWrite, a TransactionalID or
// ManualFlushing. The idempotent producer keeps a partition's records in the order they were produced
// across franz-go's own retries, and the brokers drop a batch it sends twice.
//
// # Acknowledgements and the position
//
// The processor moves the position past a record only after Handle returned nil for it and for every
// record before it, so a record behind the position is always stored in Kafka with acks=all. The reverse
// does not hold, and delivery is at least once. The idempotent producer removes the duplicates of its own
// retries, within one producer session (one client), so a broker that fails a request and is asked again
// does not get a record twice. It cannot remove what inorder delivers again: with a window, the records
// after the durable position when a processor stops, crashes or loses its database connection (at most the
// window; one at a time, a crash or a lost connection only), records of other keys that had succeeded
// after a record that failed in the window, and a record whose Handle gave up on ctx while franz-go still
// had it in flight. Each of those is a new produce and is written again, in the same
// session or after a restart alike, after its first copy in its partition. Consumers that must not act
// twice drop duplicates by the inorder_process and inorder_id headers.
//
// # Failures
//
// A record the brokers will never accept halts the stream with a permanent error (handlers.Permanent)
// that names the record and the topic: a record larger than a record batch may be (the client's
// ProducerBatchMaxBytes, 1,000,012 bytes by default, which franz-go checks before sending) or than the
// topic accepts (its max.message.bytes, which the broker checks), a topic that does not exist while the
// brokers do not create topics (after franz-go has looked for it a few times, kgo.UnknownTopicRetries), a
// topic name Kafka cannot accept, a record the broker refuses as invalid (a record without a key to a
// compacted topic), and a refusal for authorization. The processor retries those at its longest backoff
// only, until an operator fixes the cause (creates the topic, grants the ACL) or skips the record. Every
// other failure is retried with backoff.
//
// The broker refuses a whole batch, not a record, so set ProducerBatchMaxBytes (--kafka-max-message-bytes)
// at or below the topic's max.message.bytes: then a record too large is refused by the client, alone,
// before it is sent. Otherwise a batch of records that fit one by one can be refused whole, and the error
// names a record that is not too large by itself; the error gives its size.
//
// # Timeouts
//
// franz-go retries a failing produce by itself, without limit unless told otherwise, and the idempotent
// producer will not take back a request it has sent. Handle returns when its context ends (the
// processor's HandlerTimeout), with the context's error, whatever franz-go is still doing. Set the
// client's RecordDeliveryTimeout below the handler timeout (the CLI's --kafka-delivery-timeout, four fifths of
// it by default), so that franz-go fails a record it cannot deliver before that, as far as it safely can (a
// record of a request the brokers never answered stays in flight): the record then fails cleanly and is
// not written twice when delivered again.
//
// # Tests
//
// The caller builds and owns the client. Tests and examples can run it against
// github.com/twmb/franz-go/pkg/kfake, an in-process cluster speaking the Kafka protocol, as this package's
// example does.
package kafka
