// Package pubsub is a sink that publishes each record to Google Cloud Pub/Sub, with the record's key as the
// ordering key, and lets the position move past a record only once Pub/Sub has acknowledged it.
//
// # Messages
//
// Each record becomes one message. Its data is the value of the payload column (Config.PayloadColumn,
// "payload" unless set): a json or jsonb value or a string as its bytes, a bytea value as is, NULL as
// empty data, and any other value as its JSON encoding. A record without that column is published whole,
// as one JSON object with its columns in their selected order, the same form the stdout sink prints.
//
// Every message carries these attributes:
//
//	inorder_id          the record's id column as text
//	inorder_process     the name of the process that published it
//	inorder_created_at  the record's created_at column in UTC, as time.RFC3339Nano
//	event_type          the record's type column, or its event_type column (left out when it has neither)
//	traceparent         the W3C trace context of the publish's span, and tracestate when it has one:
//	                    when the delivery is traced or the row carries a trace context (see
//	                    processor's "Tracing")
//
// Each publish is a producer span "send <topic>", a child of the delivery attempt's, ended when Pub/Sub
// settles it, when the processor records spans.
//
// The ordering key is the record's key: the process's key column, aggregate_id by default. A message is
// limited to Config.MaxMessageBytes (10 MB less 100 kB unless set), counted as its data plus its attribute
// names and values plus its ordering key. A larger record halts the stream with a permanent error that
// names the record and its size.
//
// # Topics
//
// Records go to Config.Topic, a topic ID in the client's project or a full topic name. With
// Config.TopicTemplate the topic follows the record's event type instead: "{type}" in the template is
// replaced by the type, and records without a type go to Config.Topic. Config.TopicFunc chooses the topic
// in code and takes precedence over both. The handler keeps one publisher per topic, with message ordering
// enabled; it does not create topics. Close flushes and stops the publishers.
//
// # Ordering
//
// The processor hands records over in (created_at, id) order and the handler publishes them in that
// order. The client library sends the messages of one ordering key one batch at a time, in the order they
// were published, and Pub/Sub stores them in that order; subscriptions created with message ordering
// enabled deliver them in that order. Messages with different ordering keys are independent of each other,
// and a record with an empty key is published without an ordering key, for which Pub/Sub promises no order
// at all. To keep a whole table in one order, give every record the same key.
//
// Up to Config.MaxInFlight records (100 unless set) are published and not yet acknowledged at once. This
// does not weaken the order of a key: the client sends a key's next batch only after the previous one was
// acknowledged.
//
// # Acknowledgements and the position
//
// Publishing returns a result at once, and the processor waits on the results in the order the records
// were sent. Waiting on a result calls the client's PublishResult.Get, which returns once Pub/Sub has
// acknowledged the message, that is stored it durably, or once the publish has failed. The processor moves
// the position past a record only after that wait returned without an error and every earlier wait did
// too, so a record behind the position is always stored in Pub/Sub. The reverse does not hold: a crash
// between the acknowledgement and the durable position, or a failure of an earlier record while later ones
// were in flight, publishes a record again. Delivery is at least once, and subscribers that must not act
// twice drop duplicates by the inorder_process and inorder_id attributes.
//
// # Failures
//
// When a publish fails, the client pauses the message's ordering key: every message on the key queued
// after the failed one fails as well, without being sent, until the key is resumed. Nothing published
// after the failed record on its key can therefore be acknowledged before it. (The client sends the
// messages of a key in batches, and a refused request fails every message in it, so the stream may halt on
// an earlier record of the same request than the one Pub/Sub objected to.) The processor stops sending,
// waits out the records in flight without counting them, records the failure in the cursor row and
// delivers again from the failed record after a backoff.
//
// The handler resumes the key itself (ResumePublish), and only when two things hold, each of which keeps
// the order. First, every publish on the key it had started has settled: the messages queued behind the
// failed one are refused only as their turn comes, and resuming while one of them is still queued would
// let it through ahead of the failed record. Second, an error has gone back to the processor: until then
// the processor goes on sending records after the failed one, which must be refused too, and from then on
// it sends nothing until it delivers again from its position, which is before the failed record because
// that record was never acknowledged. So a failed Wait waits for the key's other publishes to settle and
// resumes the key before it returns the error, and the first Send of the new delivery resumes any key
// still paused (waiting for its publishes first, within its context) before it publishes. The failed
// record published again is then the first message on its key after the pause.
//
// Because resuming depends on what the processor does after an error, a handler serves one process and
// refuses the records of another with a permanent error.
//
// A message too large for Pub/Sub, a topic name that cannot be valid and an error with the InvalidArgument
// code are permanent failures (handlers.Permanent): the processor retries them at its longest backoff only,
// until an operator fixes the cause or skips the record. Every other error is retried with backoff.
//
// The client library itself retries the Unavailable, Internal and similar codes for up to
// PublishSettings.Timeout (60s by default) before a result fails. When the processor's wait ends first (its
// HandlerTimeout is 30s by default), the record counts as failed and is published again after a backoff
// while the first publish may still be under way. The order still holds, since the new message queues
// behind the first on its key and is refused if the first fails, but the record may be stored twice. A
// PublishSettings.Timeout below the HandlerTimeout avoids this.
//
// # Emulator and tests
//
// The caller builds and owns the client. pubsub.NewClient honours PUBSUB_EMULATOR_HOST: when it is set,
// the client talks to the emulator at that address without credentials, so the same program runs against
// the emulator unchanged. Tests can also run the client against the in-process fake in
// cloud.google.com/go/pubsub/v2/pstest, as this package's example does.
package pubsub
