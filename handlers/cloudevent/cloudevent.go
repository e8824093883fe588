// Package cloudevent makes a CloudEvents 1.0 event of a record, for the sinks that can send one instead
// of their own format: the webhook, Kafka, Pub/Sub, NATS JetStream and RabbitMQ handlers take an Envelope
// in their Config and follow the CloudEvents protocol binding of their transport.
//
// A record's event has:
//   - id: the process and the record id, <process>:<id>, the same on every delivery of the record;
//   - source: Config.Source, by default inorder://<process> (inorder:<process>, percent-encoded, for a
//     name that is not a URI host);
//   - type: the record's type column, or Config.Type when the record has none or it is NULL;
//   - time: the record's created_at, RFC 3339;
//   - subject: the record's key, left out when it has none;
//   - datacontenttype: application/json for a payload that is JSON, application/octet-stream otherwise;
//   - traceparent and tracestate: the delivery's trace context, per the distributed-tracing extension
//     (the same trace the transport's own traceparent header carries);
//   - specversion 1.0.
//
// In structured mode (Structured) the message body is the JSON event format,
// application/cloudevents+json, with the payload as data, or as data_base64 when it is not JSON. In binary
// mode (Binary) the body is the payload and the attributes travel as the transport's headers, named by its
// binding: ce-id for HTTP and Pub/Sub, ce_id for Kafka, cloudEvents:id for AMQP (RabbitMQ), and the data
// content type as the transport's content type. The NATS binding defines the structured mode only.
package cloudevent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
)

// specVersion is the CloudEvents version of every event.
const specVersion = "1.0"

// DefaultType is the type of an event whose record has no type: no type column, or NULL in it.
const DefaultType = "dev.inorder.record"

// StructuredContentType is the content type of a message in structured mode: the JSON event format.
const StructuredContentType = "application/cloudevents+json; charset=UTF-8"

// Data content types of an event's payload.
const (
	// jsonContentType is the data content type of a payload that is JSON.
	jsonContentType = "application/json"
	// bytesContentType is the data content type of a payload that is not JSON.
	bytesContentType = "application/octet-stream"
)

// Mode is a content mode of the CloudEvents protocol bindings.
type Mode string

const (
	// Binary sends the payload as the message body and the attributes as the transport's headers.
	Binary Mode = "binary"
	// Structured sends the whole event as the message body in the JSON event format.
	Structured Mode = "structured"
)

// Config configures an Envelope. Every field has a documented default.
type Config struct {
	// Mode is the content mode. Empty means Binary: attributes as headers keep the payload as the
	// application wrote it, and let brokers route and filter on them without reading the body. A
	// handler whose binding has no binary mode (NATS) refuses Binary.
	Mode Mode
	// Source is every event's source attribute, a URI reference. Empty means inorder://<process>
	// (inorder:<process>, percent-encoded, for a name that is not a URI host).
	Source string
	// Type is the type of an event whose record has no type (no type column, or NULL in it). Empty means
	// DefaultType.
	Type string
}

// Envelope makes the events of records. It is immutable and safe for concurrent use.
type Envelope struct {
	mode   Mode
	source string
	typ    string
}

// New checks cfg and returns an envelope.
func New(cfg Config) (*Envelope, error) {
	e := &Envelope{mode: cfg.Mode, source: cfg.Source, typ: cfg.Type}
	switch e.mode {
	case "":
		e.mode = Binary
	case Binary, Structured:
	default:
		return nil, fmt.Errorf("cloudevent: Config.Mode %q is neither %s nor %s", cfg.Mode, Binary, Structured)
	}
	if e.source != "" {
		if _, err := url.Parse(e.source); err != nil {
			return nil, fmt.Errorf("cloudevent: Config.Source %q is not a URI reference: %w", e.source, errors.Unwrap(err))
		}
	}
	if e.typ == "" {
		e.typ = DefaultType
	}
	return e, nil
}

// hostName matches a process name that is a URI host as it is: unreserved characters only.
var hostName = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// defaultSource is the source of the events of process when Config.Source is empty: inorder://<process>,
// or inorder:<process> percent-encoded when the name holds a character a URI host may not.
func defaultSource(process string) string {
	if hostName.MatchString(process) {
		return "inorder://" + process
	}
	return "inorder:" + url.PathEscape(process)
}

// Mode returns the envelope's content mode.
func (e *Envelope) Mode() Mode { return e.mode }

// Event is one record's CloudEvent: its context attributes and its data.
type Event struct {
	ID          string
	Source      string
	Type        string
	Subject     string // "" when the record has no key
	Time        time.Time
	TraceParent string // "" when the delivery is not traced
	TraceState  string
	// DataContentType is application/json for a payload that is JSON, application/octet-stream otherwise, ""
	// when there is no data.
	DataContentType string
	// Data is the payload, nil for none (a NULL payload column).
	Data []byte
}

// Of returns rec's event under e: typ is the record's type ("" for none: the envelope's default type),
// data the payload the handler sends, and ctx carries the delivery's trace context, which the handler
// also sends in its own traceparent header.
func Of[T any](ctx context.Context, e *Envelope, rec *handlers.Record[T], typ string, data []byte) Event {
	ev := Event{
		ID:      rec.Process + ":" + rec.ID,
		Source:  e.source,
		Type:    typ,
		Subject: rec.Key,
		Time:    rec.CreatedAt.UTC(),
		Data:    data,
	}
	if ev.Source == "" {
		ev.Source = defaultSource(rec.Process)
	}
	if ev.Type == "" {
		ev.Type = e.typ
	}
	if data != nil {
		ev.DataContentType = bytesContentType
		if json.Valid(data) {
			ev.DataContentType = jsonContentType
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, c)
		ev.TraceParent, ev.TraceState = c["traceparent"], c["tracestate"]
	}
	return ev
}

// Attribute is one context attribute of an event in binary mode, its name without a binding's prefix.
type Attribute struct{ Name, Value string }

// Attributes returns the event's attributes for binary mode, in a fixed order, leaving out those without
// a value and datacontenttype, which every binding carries as its transport's content type.
func (ev Event) Attributes() []Attribute {
	attrs := []Attribute{
		{"specversion", specVersion},
		{"id", ev.ID},
		{"source", ev.Source},
		{"type", ev.Type},
		{"time", ev.Time.Format(time.RFC3339Nano)},
	}
	for _, a := range []Attribute{{"subject", ev.Subject}, {"traceparent", ev.TraceParent}, {"tracestate", ev.TraceState}} {
		if a.Value != "" {
			attrs = append(attrs, a)
		}
	}
	return attrs
}

// structured is the JSON event format of an event.
type structured struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            string          `json:"time"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	TraceParent     string          `json:"traceparent,omitempty"`
	TraceState      string          `json:"tracestate,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
	DataBase64      string          `json:"data_base64,omitempty"`
}

// MarshalJSON encodes the event in the JSON event format, the body of a structured-mode message: JSON
// data as data, other bytes as data_base64.
func (ev Event) MarshalJSON() ([]byte, error) {
	s := structured{
		SpecVersion: specVersion, ID: ev.ID, Source: ev.Source, Type: ev.Type, Subject: ev.Subject,
		Time: ev.Time.Format(time.RFC3339Nano), DataContentType: ev.DataContentType,
		TraceParent: ev.TraceParent, TraceState: ev.TraceState,
	}
	switch ev.DataContentType {
	case jsonContentType:
		s.Data = ev.Data
	case bytesContentType:
		s.DataBase64 = base64.StdEncoding.EncodeToString(ev.Data)
	}
	return json.Marshal(s)
}
