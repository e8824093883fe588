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
	"errors"
	"fmt"
	"net/url"

	"github.com/inorder-dev/inorder/internal/ceformat"
)

// DefaultType is the type of an event whose record has no type: no type column, or NULL in it.
const DefaultType = "dev.inorder.record"

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
type Envelope ceformat.Envelope

// New checks cfg and returns an envelope.
func New(cfg Config) (*Envelope, error) {
	mode, source, typ := cfg.Mode, cfg.Source, cfg.Type
	switch mode {
	case "":
		mode = Binary
	case Binary, Structured:
	default:
		return nil, fmt.Errorf("cloudevent: Config.Mode %q is neither %s nor %s", cfg.Mode, Binary, Structured)
	}
	if source != "" {
		if _, err := url.Parse(source); err != nil {
			return nil, fmt.Errorf("cloudevent: Config.Source %q is not a URI reference: %w", source, errors.Unwrap(err))
		}
	}
	if typ == "" {
		typ = DefaultType
	}
	return (*Envelope)(ceformat.New(string(mode), source, typ)), nil
}

// Mode returns the envelope's content mode.
func (e *Envelope) Mode() Mode { return Mode((*ceformat.Envelope)(e).Mode()) }
