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
// Any error halts the stream on its record; the processor retries with capped exponential backoff and
// never moves past a failing record on its own. Wrap an error with Permanent when retrying soon is
// pointless (the record itself was rejected) and with RetryAfter when the sink said when to come back.
//
// # Sinks
//
// The subpackages are the sinks inorder ships: stdout (JSON lines), webhook (signed HTTP POSTs), pubsub
// (Google Pub/Sub with ordering keys) and kafka (Apache Kafka, keyed by the record's key).
package handlers
