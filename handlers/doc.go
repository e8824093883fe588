// Package handlers defines what a sink is to inorder: a Handler receives each record in order, and its
// answer decides whether the position moves past it.
//
// # Kinds of handler
//
// A Handler delivers one record at a time and returns once the record is safe at the sink. A TxHandler
// writes into the same database transaction that moves the position, for exactly-once read models. An
// AsyncHandler keeps several records in flight and settles them in order, for sinks such as Pub/Sub that
// acknowledge asynchronously. A Flusher buffers output and is flushed before any position is made durable.
//
// # Failures
//
// An error stops the stream on its record: the processor retries it with capped exponential backoff and
// never moves past a failing record on its own. An error that may pass (a 5xx, a timeout) makes the stream
// retrying, and only halted once the record has failed for longer than the processor's HaltAfter; one
// wrapped with Permanent (the sink refused the record itself) halts it at once. Either way the record is
// retried until it goes through, an operator retries it now (`inorder retry`) or skips it. Wrap an error
// with RetryAfter when the sink said when to come back. A handler that moves many bytes (a body of
// megabytes on a slow link) calls Progress as they move, so that the processor's handler timeout bounds a
// silence rather than the whole call. A handler that reads columns by name says which
// (ColumnReader), so that a typo fails at start.
//
// # Sinks
//
// The subpackages are the sinks inorder ships: stdout (JSON lines), webhook (signed HTTP POSTs), pubsub
// (Google Pub/Sub with ordering keys), kafka (Apache Kafka, keyed by the record's key), jetstream (NATS
// JetStream, deduplicated by message id), rabbitmq (RabbitMQ with publisher confirms) and redisstream
// (Redis Streams, a stream per key or one).
package handlers
