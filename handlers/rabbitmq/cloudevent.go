package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

// cloudEvent turns msg, rec's message, into its CloudEvent as the AMQP binding says: in binary mode
// cloudEvents: application properties (the headers table, attribute values in their canonical string
// form) and the data content type as the content-type property (3.1), in structured mode the JSON event
// format as the body with content-type application/cloudevents+json (3.2).
func (h *Handler) cloudEvent(ctx context.Context, rec *handlers.Record[handlers.Row], msg *amqp.Publishing) error {
	typ, _ := rec.Value.Text(h.typeColumns...)
	ev := ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, msg.Body)
	if h.envelope.Mode() == cloudevent.Structured {
		body, err := json.Marshal(ev)
		if err != nil {
			return handlers.Permanent(fmt.Errorf("rabbitmq: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		msg.Body = body
		msg.ContentType = ceformat.StructuredContentType
		return nil
	}
	for _, a := range ev.Attributes() {
		msg.Headers["cloudEvents:"+a.Name] = a.Value
	}
	msg.ContentType = ev.DataContentType
	return nil
}
