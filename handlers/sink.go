package handlers

// The headers the message sinks (handlers/kafka, handlers/jetstream, handlers/rabbitmq, and as attributes
// handlers/pubsub) set on every message, the same in each, so that a consumer reads them alike whatever
// carried the record. handlers/redisstream names its entry's fields on its own (redisstream.FieldID, ...).
const (
	// HeaderID carries the record's id column as text. With HeaderProcess it identifies a record across
	// redeliveries, so consumers can drop duplicates.
	HeaderID = "inorder_id"
	// HeaderProcess carries the name of the process that produced the record.
	HeaderProcess = "inorder_process"
	// HeaderCreatedAt carries the record's created_at column in UTC as time.RFC3339Nano.
	HeaderCreatedAt = "inorder_created_at"
	// HeaderKey carries the record's key (the process's key column), where the sink has no place of its
	// own for it (JetStream). It is left out for a record without one.
	HeaderKey = "inorder_key"
	// HeaderEventType carries the value of the record's type column (the sink's Config.TypeColumn; by
	// default the type column, or the event_type column when the record has none). It is left out when the
	// record has no such column or its value is NULL.
	HeaderEventType = "event_type"
)

// The settings the message sinks share.
const (
	// DefaultPayloadColumn is the column whose value becomes a message's body when the sink's
	// Config.PayloadColumn is empty; a row without it is sent whole, as JSON.
	DefaultPayloadColumn = "payload"
	// WholeRecord as a sink's Config.PayloadColumn sends the whole row as JSON even when it has a payload
	// column.
	WholeRecord = "-"
	// KeyPlaceholder in a subject or stream name (jetstream.Config.Subject, redisstream.Config.Stream)
	// stands for the record's key: "orders.{key}" publishes the records of key 42 to orders.42.
	KeyPlaceholder = "{key}"
)
