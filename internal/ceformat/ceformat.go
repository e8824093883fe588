// Package ceformat makes the CloudEvent of a record under a handlers/cloudevent.Envelope, for the sinks:
// the event's attributes for binary mode and its JSON event format for structured mode. The public
// package says how each attribute is made; the sinks convert the *cloudevent.Envelope of their Config to
// an *Envelope, the type it is defined as, to make the events.
package ceformat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
)

// specVersion is the CloudEvents version of every event.
const specVersion = "1.0"

// StructuredContentType is the content type of a message in structured mode: the JSON event format.
const StructuredContentType = "application/cloudevents+json; charset=UTF-8"

// Data content types of an event's payload.
const (
	// jsonContentType is the data content type of a payload that is JSON.
	jsonContentType = "application/json"
	// bytesContentType is the data content type of a payload that is not JSON.
	bytesContentType = "application/octet-stream"
)

// Envelope holds what the events of records are made with. handlers/cloudevent.Envelope is defined as
// it, so that a sink converts one to the other.
type Envelope struct {
	mode   string
	source string
	typ    string
}

// New returns an envelope of the content mode, source ("" for the default) and default type, which
// handlers/cloudevent.New has checked.
func New(mode, source, typ string) *Envelope {
	return &Envelope{mode: mode, source: source, typ: typ}
}

// Mode returns the envelope's content mode, as handlers/cloudevent.Mode spells it.
func (e *Envelope) Mode() string { return e.mode }

// hostName matches a process name that is a URI host as it is: unreserved characters only.
var hostName = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// defaultSource is the source of the events of process when the envelope has none: inorder://<process>,
// or inorder:<process> percent-encoded when the name holds a character a URI host may not.
func defaultSource(process string) string {
	if hostName.MatchString(process) {
		return "inorder://" + process
	}
	return "inorder:" + url.PathEscape(process)
}

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
