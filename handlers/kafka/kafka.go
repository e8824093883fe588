package kafka

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// Config configures a Handler. Client and one of Topic, TopicColumn and TopicFunc are required; every
// other field has a documented default.
type Config struct {
	// Client produces the records. The caller creates it (kgo.NewClient with kgo.SeedBrokers and its own
	// TLS and SASL options) and closes it after the processor has stopped. New refuses a client that
	// cannot keep the order or the durability the position relies on: one with DisableIdempotentWrite
	// (the idempotent producer, which franz-go only runs with acks from all in-sync replicas), a
	// TransactionalID or ManualFlushing. franz-go's defaults are right; see the package documentation for
	// RecordDeliveryTimeout and ProducerBatchMaxBytes. Required.
	Client *kgo.Client

	// Topic is the topic records are produced to. It is required unless TopicColumn or TopicFunc is set;
	// with TopicColumn it is where records whose topic column is NULL or empty go.
	Topic string
	// TopicColumn, when set, names a column holding each record's topic, as an outbox table may have.
	// Records whose value there is NULL or empty go to Topic, and halt the stream with a permanent error
	// when Topic is empty. Empty means every record goes to Topic.
	TopicColumn string
	// TopicFunc, when set, chooses each record's topic and takes precedence over Topic and TopicColumn.
	// An error it returns is the record's failure; wrap it with handlers.Permanent when retrying soon
	// cannot help. Nil means Topic and TopicColumn decide.
	TopicFunc func(rec *handlers.Record[handlers.Row]) (string, error)

	// PayloadColumn names the column whose value is the Kafka record's value: json and jsonb values and
	// strings as their bytes, bytea as is, NULL as a null value (a tombstone on a compacted topic) and
	// other values as their JSON encoding. A record without such a column is sent whole, as one JSON
	// object with its columns in order; handlers.WholeRecord ("-") sends every record that way. Empty means
	// handlers.DefaultPayloadColumn ("payload"), as the Pub/Sub sink does.
	PayloadColumn string
	// TypeColumn names the column whose value is sent in the event_type header. Empty means the type
	// column, or the event_type column when the record has no type column, as the Pub/Sub sink does.
	TypeColumn string
	// Envelope, when set, sends each record as a CloudEvent in the envelope's content mode, as the
	// CloudEvents Kafka binding says: the payload as the data and ce_ headers with content-type in binary
	// mode, the JSON event format as the value in structured mode; the type from TypeColumn. Nil means the
	// handler's own format.
	Envelope *cloudevent.Envelope
}

// Handler produces each record to Kafka with the record's key as the Kafka record key, and returns once
// the brokers acknowledged it. It implements handlers.Handler for handlers.Row and is safe for concurrent
// use: with processor.Config.MaxInFlight above 1, the processor calls it for records of different keys
// at once, one record per key at a time, and franz-go gathers concurrent records into batches. It holds
// nothing of its own to release; the caller closes the client.
type Handler struct {
	client      *kgo.Client
	topic       string // checked by New
	topicColumn string
	topicFunc   func(rec *handlers.Record[handlers.Row]) (string, error)
	// payloadColumn is Config.PayloadColumn with its default, "" for the whole record.
	payloadColumn string
	// typeColumns are the columns tried in turn for the event_type header.
	typeColumns []string
	// reads are the columns named in the configuration, which every record must have.
	reads    []string
	envelope *cloudevent.Envelope
}

var _ handlers.Handler[handlers.Row] = (*Handler)(nil)

// New checks cfg and its client's options and returns a handler. It makes no request.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, errors.New("kafka: Config.Client is required")
	}
	if cfg.Topic == "" && cfg.TopicColumn == "" && cfg.TopicFunc == nil {
		return nil, errors.New("kafka: one of Config.Topic, Config.TopicColumn and Config.TopicFunc is required")
	}
	if cfg.Topic != "" {
		if err := checkTopic(cfg.Topic); err != nil {
			return nil, fmt.Errorf("kafka: Config.Topic: %w", err)
		}
	}
	if err := checkClient(cfg.Client); err != nil {
		return nil, fmt.Errorf("kafka: Config.Client: %w", err)
	}
	h := &Handler{
		envelope:      cfg.Envelope,
		client:        cfg.Client,
		topic:         cfg.Topic,
		topicColumn:   cfg.TopicColumn,
		topicFunc:     cfg.TopicFunc,
		payloadColumn: cfg.PayloadColumn,
		typeColumns:   []string{"type", "event_type"},
	}
	switch h.payloadColumn {
	case "":
		h.payloadColumn = handlers.DefaultPayloadColumn
	case handlers.WholeRecord:
		h.payloadColumn = "" // handlers.Row.Payload's whole row
	default:
		h.reads = append(h.reads, h.payloadColumn)
	}
	if cfg.TypeColumn != "" {
		h.typeColumns = []string{cfg.TypeColumn}
		h.reads = append(h.reads, cfg.TypeColumn)
	}
	if cfg.TopicColumn != "" {
		h.reads = append(h.reads, cfg.TopicColumn)
	}
	return h, nil
}

// ReadsColumns implements handlers.ColumnReader: the payload, type and topic columns the configuration
// names (not the default payload column, which a record may lack: it is then sent whole).
func (h *Handler) ReadsColumns() []string { return h.reads }

// checkClient refuses the client options under which an acknowledged record could be lost or written
// twice by the client's own retries, or a record never sent. franz-go runs the idempotent producer only
// with acks from all in-sync replicas, so a client that passes has both.
func checkClient(cl *kgo.Client) error {
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return errors.New("DisableIdempotentWrite is set: without the idempotent producer a produce request " +
			"retried by the client can write a record twice or behind a later one")
	}
	if v := cl.OptValues(kgo.TransactionalID); len(v) == 2 {
		if set, _ := v[1].(bool); set {
			return errors.New("TransactionalID is set: the handler produces outside transactions, which a " +
				"transactional client refuses")
		}
	}
	if v, _ := cl.OptValue(kgo.ManualFlushing).(bool); v {
		return errors.New("ManualFlushing is set: records would wait for a Flush that nothing calls")
	}
	return nil
}

// Handle produces rec and waits until the brokers acknowledged it (all in-sync replicas have it), the
// produce failed, or ctx is done, whichever comes first. A record the brokers will never accept (too
// large, to a topic that does not exist or cannot, refused for authorization) fails with a permanent error
// naming the record and the topic; every other failure is retried by the processor.
//
// When ctx ends first, Handle returns at once with ctx's error, though franz-go may still be sending the
// record (the idempotent producer cannot take back a request the brokers may have written): the record
// may then be written once more when the processor delivers it again. It is written after the first copy
// in its partition, so the order of a key holds.
func (h *Handler) Handle(ctx context.Context, rec *handlers.Record[handlers.Row]) (err error) {
	topic, err := h.topicOf(rec)
	if err != nil {
		return err
	}
	ctx, span := tracecontext.Start(ctx, tracerName, "send "+topic, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", topic))
		if rec.Key != "" {
			span.SetAttributes(attribute.String("messaging.kafka.message.key", rec.Key))
		}
	}
	defer func() { tracecontext.End(span, err) }()
	r, err := h.record(rec, topic)
	if err != nil {
		return err
	}
	tracecontext.Inject(ctx, headerCarrier{r}) // traceparent and tracestate
	if h.envelope != nil {
		if err := h.cloudEvent(ctx, rec, r); err != nil {
			return err
		}
	}
	// ProduceSync sends at once rather than after the client's linger, but waits for a record already
	// sent however long franz-go retries it; the select bounds the wait by ctx.
	done := make(chan error, 1)
	go func() { done <- h.client.ProduceSync(ctx, r).FirstErr() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // settled as ctx ended: the answer counts
		default:
			return fmt.Errorf("kafka: record %s to topic %q: no acknowledgement yet: %w", rec.ID, topic, ctx.Err())
		}
	}
	if err != nil {
		return failure(rec, topic, h.topicColumn == "" && h.topicFunc == nil, r, err)
	}
	return nil
}

// failure describes a failed produce, marking as permanent what the brokers will never accept for the
// record, and as the sink's outage what they refuse every record: credentials or rights that do not let
// this client produce, and with one topic for every record (fixed), a topic that does not exist or that
// the client may not write. With a topic per record, those are the record's: its topic is wrong.
func failure(rec *handlers.Record[handlers.Row], topic string, fixed bool, r *kgo.Record, err error) error {
	err = fmt.Errorf("kafka: produce record %s to topic %q: %w", rec.ID, topic, err)
	switch {
	case errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.SaslAuthenticationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return handlers.Unavailable(err, "the client's credentials and its rights on the cluster")
	case fixed && (errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)):
		return handlers.Unavailable(fmt.Errorf("%w; the topic does not exist and the brokers do not create it", err),
			fmt.Sprintf("the topic %q (--kafka-topic): create it, or correct the name", topic))
	case fixed && errors.Is(err, kerr.TopicAuthorizationFailed):
		return handlers.Unavailable(err, fmt.Sprintf("the client's rights on the topic %q (an ACL allowing Write)", topic))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return handlers.Permanent(fmt.Errorf("%w; the record is %d bytes (key, value and headers), more than a "+
			"record batch may hold (the client's ProducerBatchMaxBytes) or the topic accepts (max.message.bytes)",
			err, recordSize(r)))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return handlers.Permanent(fmt.Errorf("%w; the topic does not exist and the brokers do not create it", err))
	case errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return handlers.Permanent(err)
	}
	return err
}

// tracerName is the instrumentation scope of the produces' spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/kafka"

// headerCarrier writes a trace context into a record's headers.
type headerCarrier struct{ r *kgo.Record }

func (c headerCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range c.r.Headers {
		if h.Key == key {
			c.r.Headers[i].Value = []byte(value)
			return
		}
	}
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		keys[i] = h.Key
	}
	return keys
}

// recordSize is what ProducerBatchMaxBytes bounds, less the batch's own framing.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// record builds the Kafka record for rec.
func (h *Handler) record(rec *handlers.Record[handlers.Row], topic string) (*kgo.Record, error) {
	value, err := rec.Value.Payload(h.payloadColumn)
	if err != nil {
		return nil, handlers.Permanent(fmt.Errorf("kafka: encode record %s: %w", rec.ID, err))
	}
	headers := []kgo.RecordHeader{
		{Key: handlers.HeaderID, Value: []byte(rec.ID)},
		{Key: handlers.HeaderProcess, Value: []byte(rec.Process)},
		{Key: handlers.HeaderCreatedAt, Value: []byte(rec.CreatedAt.UTC().Format(time.RFC3339Nano))},
	}
	if typ, ok := rec.Value.Text(h.typeColumns...); ok {
		headers = append(headers, kgo.RecordHeader{Key: handlers.HeaderEventType, Value: []byte(typ)})
	}
	r := &kgo.Record{Topic: topic, Value: value, Headers: headers}
	if rec.Key != "" {
		r.Key = []byte(rec.Key)
	}
	return r, nil
}

// topicOf returns the topic rec goes to. Only a topic taken from the record is checked here: New checked
// Config.Topic.
func (h *Handler) topicOf(rec *handlers.Record[handlers.Row]) (string, error) {
	var t string
	switch {
	case h.topicFunc != nil:
		var err error
		if t, err = h.topicFunc(rec); err != nil {
			return "", fmt.Errorf("kafka: choose the topic of record %s: %w", rec.ID, err)
		}
		if t == "" {
			return "", handlers.Permanent(fmt.Errorf("kafka: TopicFunc chose no topic for record %s", rec.ID))
		}
	case h.topicColumn != "":
		var ok bool
		if t, ok = rec.Value.Text(h.topicColumn); !ok || t == "" {
			if h.topic == "" {
				return "", handlers.Permanent(fmt.Errorf("kafka: record %s has no topic in column %q (NULL, empty "+
					"or not selected), and no default topic is set", rec.ID, h.topicColumn))
			}
			return h.topic, nil
		}
	default:
		return h.topic, nil
	}
	if err := checkTopic(t); err != nil {
		return "", handlers.Permanent(fmt.Errorf("kafka: record %s: %w", rec.ID, err))
	}
	return t, nil
}

// topicPattern is what Kafka accepts as a topic name.
var topicPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

func checkTopic(t string) error {
	if !topicPattern.MatchString(t) || t == "." || t == ".." {
		return fmt.Errorf("topic %q is not a valid Kafka topic name: it must be 1 to 249 letters, digits and . _ -, "+
			"and not . or ..", t)
	}
	return nil
}
