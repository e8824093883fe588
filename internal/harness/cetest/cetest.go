// Package cetest reads CloudEvents back with the official CloudEvents Go SDK, for the sinks' tests: a
// message of any transport that carries attributes as named headers becomes an SDK binding message, and
// Check compares the event the SDK parsed with the record it came from.
package cetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
)

// Message is a transport's message as its CloudEvents binding sees it: headers (Kafka headers, Pub/Sub
// attributes, AMQP application properties), the header prefix of its binary mode, the content type
// where the binding keeps it, and the body. It implements the SDK's binding.Message.
type Message struct {
	Prefix      string
	Headers     map[string]string
	ContentType string
	Body        []byte
}

var (
	_ binding.Message               = (*Message)(nil)
	_ binding.MessageMetadataReader = (*Message)(nil)
)

// ReadEncoding implements binding.MessageReader as the SDK's own bindings do: an event format's content
// type means structured mode, a prefixed specversion header binary mode.
func (m *Message) ReadEncoding() binding.Encoding {
	if format.Lookup(m.ContentType) != nil {
		return binding.EncodingStructured
	}
	if _, ok := m.Headers[m.Prefix+"specversion"]; ok {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

// ReadStructured implements binding.MessageReader.
func (m *Message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.ContentType)
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.Body))
}

// ReadBinary implements binding.MessageReader: every prefixed header is an attribute or an extension,
// and the content type is datacontenttype.
func (m *Message) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	specs := spec.New()
	v := specs.Version(m.Headers[m.Prefix+"specversion"])
	if v == nil {
		return binding.ErrNotBinary
	}
	for k, val := range m.Headers {
		name, ok := strings.CutPrefix(k, m.Prefix)
		if !ok {
			continue
		}
		var err error
		if attr := v.Attribute(name); attr != nil {
			err = w.SetAttribute(attr, val)
		} else {
			err = w.SetExtension(name, val)
		}
		if err != nil {
			return err
		}
	}
	if m.ContentType != "" {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), m.ContentType); err != nil {
			return err
		}
	}
	if m.Body != nil {
		return w.SetData(bytes.NewReader(m.Body))
	}
	return nil
}

// Finish implements binding.Message.
func (m *Message) Finish(error) error { return nil }

// Event parses m with the SDK.
func (m *Message) Event(ctx context.Context) (*event.Event, error) { return binding.ToEvent(ctx, m) }

// Want is what a record's event must carry.
type Want struct {
	ID, Source, Type, Subject, TraceParent string
	Time                                   time.Time
	// Data is the payload, JSON: the event's data must be equal to it as JSON.
	Data string
}

// Check reports every way ev differs from w, and that the SDK validates it.
func Check(t testing.TB, ev *event.Event, w Want) {
	t.Helper()
	if err := ev.Validate(); err != nil {
		t.Errorf("event %s: not valid: %v", ev.ID(), err)
	}
	got := map[string]string{
		"specversion": ev.SpecVersion(), "id": ev.ID(), "source": ev.Source(), "type": ev.Type(),
		"subject": ev.Subject(), "datacontenttype": ev.DataContentType(),
	}
	want := map[string]string{
		"specversion": "1.0", "id": w.ID, "source": w.Source, "type": w.Type, "subject": w.Subject,
		"datacontenttype": "application/json",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("event %s: %s %q, want %q", w.ID, k, got[k], v)
		}
	}
	if !ev.Time().Equal(w.Time) {
		t.Errorf("event %s: time %s, want %s", w.ID, ev.Time(), w.Time)
	}
	if tp, _ := ev.Extensions()["traceparent"].(string); tp != w.TraceParent {
		t.Errorf("event %s: traceparent %q, want %q", w.ID, tp, w.TraceParent)
	}
	if !jsonEqual(ev.Data(), []byte(w.Data)) {
		t.Errorf("event %s: data %s, want %s", w.ID, ev.Data(), w.Data)
	}
}

// GetAttribute implements binding.MessageMetadataReader.
func (m *Message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := spec.New().Version(m.Headers[m.Prefix+"specversion"])
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		if m.ContentType == "" {
			return attr, nil
		}
		return attr, m.ContentType
	}
	if val, ok := m.Headers[m.Prefix+attr.Name()]; ok {
		return attr, val
	}
	return attr, nil
}

// GetExtension implements binding.MessageMetadataReader.
func (m *Message) GetExtension(name string) any {
	if val, ok := m.Headers[m.Prefix+name]; ok {
		return val
	}
	return nil
}
