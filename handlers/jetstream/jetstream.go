package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// msgID returns the Nats-Msg-Id the handler gives rec: its process and id, "process:id". It is the same
// for every delivery of the record, by any instance.
func msgID[T any](rec *handlers.Record[T]) string { return rec.Process + ":" + rec.ID }

// Config configures a Handler. JetStream and Subject are required; every other field has a documented
// default.
type Config struct {
	// JetStream publishes the messages. The caller connects (nats.Connect with the server's URLs and its
	// own TLS and credentials options), makes it with jetstream.New, and drains the connection after the
	// processor has stopped. Required.
	JetStream njs.JetStream

	// Subject is the subject records are published to. It may hold handlers.KeyPlaceholder ("{key}") as the
	// whole of one or more of its tokens, replaced by each record's key: "orders.{key}". Some stream must
	// capture every subject the handler publishes to (Check tells). Required.
	Subject string

	// PayloadColumn names the column whose value is the message's data: json and jsonb values and strings as
	// their bytes, bytea as is, NULL as empty data and other values as their JSON encoding. A record without
	// such a column is sent whole, as one JSON object with its columns in order; handlers.WholeRecord ("-")
	// sends every record that way. Empty means handlers.DefaultPayloadColumn ("payload"), as the Kafka and
	// Pub/Sub sinks do.
	PayloadColumn string
	// TypeColumn names the column whose value is sent in the event_type header. Empty means the type
	// column, or the event_type column when the record has no type column, as the Kafka sink does.
	TypeColumn string
	// Envelope, when set, sends each record as a CloudEvent in the envelope's content mode, as the
	// CloudEvents NATS binding says: the JSON event format as the data, the binding's only mode (New refuses
	// cloudevent.Binary); the type from TypeColumn. Nil means the handler's own format.
	Envelope *cloudevent.Envelope
}

// Handler publishes each record to a JetStream stream and returns once the stream acknowledged it. It
// implements handlers.Handler for handlers.Row and is safe for concurrent use: with
// processor.Config.MaxInFlight above 1, the processor calls it for records of different keys at once, one
// record per key at a time. It holds nothing of its own to release; the caller closes the connection.
type Handler struct {
	js      njs.JetStream
	subject string
	// perKey is whether subject holds handlers.KeyPlaceholder.
	perKey bool
	// payloadColumn is Config.PayloadColumn with its default, "" for the whole record.
	payloadColumn string
	// typeColumns are the columns tried in turn for the event_type header.
	typeColumns []string
	// reads are the columns named in the configuration, which every record must have.
	reads    []string
	envelope *cloudevent.Envelope
}

var (
	_ handlers.Handler[handlers.Row] = (*Handler)(nil)
	_ handlers.ColumnReader          = (*Handler)(nil)
)

// New checks cfg and returns a handler. It makes no request; Check asks the server whether a stream
// captures the subject.
func New(cfg Config) (*Handler, error) {
	if cfg.JetStream == nil {
		return nil, errors.New("jetstream: Config.JetStream is required")
	}
	if cfg.Subject == "" {
		return nil, errors.New("jetstream: Config.Subject is required")
	}
	perKey := strings.Contains(cfg.Subject, handlers.KeyPlaceholder)
	if err := checkSubject(strings.ReplaceAll(cfg.Subject, handlers.KeyPlaceholder, "k")); err != nil {
		return nil, fmt.Errorf("jetstream: Config.Subject %q: %w", cfg.Subject, err)
	}
	if perKey {
		for _, tok := range strings.Split(cfg.Subject, ".") {
			if strings.Contains(tok, handlers.KeyPlaceholder) && tok != handlers.KeyPlaceholder {
				return nil, fmt.Errorf("jetstream: Config.Subject %q: %s must be a whole token (between dots), "+
					"not part of one", cfg.Subject, handlers.KeyPlaceholder)
			}
		}
	}
	if cfg.Envelope != nil && cfg.Envelope.Mode() != cloudevent.Structured {
		return nil, fmt.Errorf("jetstream: Config.Envelope is in %s mode, but the CloudEvents NATS binding "+
			"defines the structured mode only", cfg.Envelope.Mode())
	}
	h := &Handler{
		envelope:      cfg.Envelope,
		js:            cfg.JetStream,
		subject:       cfg.Subject,
		perKey:        perKey,
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
	return h, nil
}

// ReadsColumns implements handlers.ColumnReader: the payload and type columns the configuration names
// (not the default payload column, which a record may lack: it is then sent whole).
func (h *Handler) ReadsColumns() []string { return h.reads }

// Subject returns the subject the handler publishes the records of key to.
func (h *Handler) Subject(key string) string {
	return strings.ReplaceAll(h.subject, handlers.KeyPlaceholder, key)
}

// Check asks the server which stream captures the handler's subject and returns its name, or an error
// that says "no stream captures subject X" when none does. With handlers.KeyPlaceholder in the subject it asks
// about the subject with the placeholder as a wildcard ("orders.*"): some stream must capture some of
// those subjects. Run it at start, to refuse a configuration that could deliver nothing.
func (h *Handler) Check(ctx context.Context) (string, error) {
	subject := h.Subject("*")
	name, err := h.js.StreamNameBySubject(ctx, subject)
	switch {
	case errors.Is(err, njs.ErrStreamNotFound):
		return "", fmt.Errorf("jetstream: no stream captures subject %s: add it to a stream's subjects", subject)
	case err != nil:
		return "", fmt.Errorf("jetstream: look for the stream capturing subject %s: %w", subject, err)
	}
	return name, nil
}

// Handle publishes rec with its Nats-Msg-Id and waits until the stream acknowledged it (stored it, or
// found it a duplicate within its duplicate window: stored already), the publish failed, or ctx is done,
// whichever comes first. A record the stream will never accept (larger than the server's max_payload or
// the stream's max_msg_size, a key that is no subject token) fails with a permanent error; a refusal
// every record would meet (no stream captures the subject, the connection is closed or lost, JetStream
// is not enabled) fails as the sink's outage (handlers.Unavailable); anything else is retried by the
// processor.
func (h *Handler) Handle(ctx context.Context, rec *handlers.Record[handlers.Row]) (err error) {
	subject, err := h.subjectOf(rec)
	if err != nil {
		return err
	}
	ctx, span := tracecontext.Start(ctx, tracerName, "send "+subject, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", msgID(rec)))
	}
	defer func() { tracecontext.End(span, err) }()
	msg, err := h.message(rec, subject)
	if err != nil {
		return err
	}
	tracecontext.Inject(ctx, headerCarrier(msg.Header)) // traceparent and tracestate
	if h.envelope != nil {
		if err := h.cloudEvent(ctx, rec, msg); err != nil {
			return err
		}
	}
	ack, err := h.js.PublishMsg(ctx, msg)
	if err != nil {
		return h.failure(rec, subject, msg, err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.nats.stream", ack.Stream),
			attribute.Int64("messaging.nats.sequence", int64(ack.Sequence)),
			attribute.Bool("messaging.nats.duplicate", ack.Duplicate))
	}
	return nil
}

// failure describes a failed publish, marking as permanent what the stream will never accept for the
// record, and as the sink's outage what it refuses every record.
func (h *Handler) failure(rec *handlers.Record[handlers.Row], subject string, msg *nats.Msg, err error) error {
	err = fmt.Errorf("jetstream: publish record %s to subject %s: %w", rec.ID, subject, err)
	var api *njs.APIError
	switch {
	case errors.Is(err, njs.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return handlers.Unavailable(fmt.Errorf("%w: no stream captures subject %s", err, subject),
			fmt.Sprintf("a stream whose subjects include %s (--nats-subject)", subject))
	case errors.Is(err, nats.ErrMaxPayload):
		return handlers.Permanent(fmt.Errorf("%w; the message is %d bytes (data and headers), more than the "+
			"server's max_payload", err, msgSize(msg)))
	case errors.As(err, &api) && api.ErrorCode == njs.JSErrCodeStreamMessageExceedsMaximum:
		return handlers.Permanent(fmt.Errorf("%w; the message is %d bytes (data and headers), more than the "+
			"stream's max_msg_size", err, msgSize(msg)))
	case errors.Is(err, njs.ErrInvalidSubject), errors.Is(err, nats.ErrBadSubject):
		return handlers.Permanent(err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoServers),
		errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrPermissionViolation):
		return handlers.Unavailable(err, "the NATS server and the connection's credentials (--nats-url, --nats-creds)")
	case errors.Is(err, njs.ErrJetStreamNotEnabled), errors.Is(err, njs.ErrJetStreamNotEnabledForAccount):
		return handlers.Unavailable(err, "JetStream on the server and the account (nats-server -js)")
	}
	if nc := h.js.Conn(); nc != nil && !nc.IsConnected() {
		return handlers.Unavailable(fmt.Errorf("%w (the connection to the server is %s)", err,
			strings.ToLower(nc.Status().String())), "the NATS server (--nats-url)")
	}
	return err
}

// tracerName is the instrumentation scope of the publishes' spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/jetstream"

// headerCarrier writes a trace context into a message's headers, with their keys as given (NATS headers
// are case-sensitive; http.Header would change traceparent into Traceparent).
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// msgSize is what max_payload bounds: the message's data and headers.
func msgSize(m *nats.Msg) int {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	return n
}

// message builds the NATS message for rec.
func (h *Handler) message(rec *handlers.Record[handlers.Row], subject string) (*nats.Msg, error) {
	data, err := rec.Value.Payload(h.payloadColumn)
	if err != nil {
		return nil, handlers.Permanent(fmt.Errorf("jetstream: encode record %s: %w", rec.ID, err))
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(njs.MsgIDHeader, msgID(rec))
	msg.Header.Set(handlers.HeaderID, rec.ID)
	msg.Header.Set(handlers.HeaderProcess, rec.Process)
	msg.Header.Set(handlers.HeaderCreatedAt, rec.CreatedAt.UTC().Format(time.RFC3339Nano))
	if rec.Key != "" {
		msg.Header.Set(handlers.HeaderKey, rec.Key)
	}
	if typ, ok := rec.Value.Text(h.typeColumns...); ok {
		msg.Header.Set(handlers.HeaderEventType, typ)
	}
	return msg, nil
}

// subjectOf returns the subject rec goes to: the fixed subject, or the template with rec's key, which must
// be a subject token.
func (h *Handler) subjectOf(rec *handlers.Record[handlers.Row]) (string, error) {
	if !h.perKey {
		return h.subject, nil
	}
	if err := checkToken(rec.Key); err != nil {
		return "", handlers.Permanent(fmt.Errorf("jetstream: record %s: key %q in subject %s: %w", rec.ID, rec.Key,
			h.subject, err))
	}
	return h.Subject(rec.Key), nil
}

// checkToken refuses a key that is not one subject token: empty, or with a dot, a wildcard or a white
// space character or control character.
func checkToken(key string) error {
	if key == "" {
		return errors.New("the record has no key (the process's key column is NULL, empty or missing)")
	}
	if i := strings.IndexFunc(key, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f
	}); i >= 0 {
		return fmt.Errorf("a key is one subject token: no '.', '*', '>', white space or control character (found %q)",
			key[i:i+1])
	}
	return nil
}

// checkSubject refuses what NATS does not accept as a subject to publish to: empty tokens, wildcards, and
// white space or control characters.
func checkSubject(s string) error {
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return errors.New("a subject is tokens separated by dots, none of them empty")
		}
		if err := checkToken(tok); err != nil {
			return errors.New("a subject to publish to holds no wildcard ('*', '>'), white space or control character")
		}
	}
	return nil
}
