package pubsub

import (
	"context"
	"encoding/json"
	"fmt"

	"cloud.google.com/go/pubsub/v2"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

// contentTypeAttr is the attribute Google's Pub/Sub binding carries a message's content type in.
const contentTypeAttr = "content-type"

// cloudEvent turns msg, rec's message, into its CloudEvent as Google's Pub/Sub binding says: in binary
// mode ce- attributes and the data content type in content-type, in structured mode the JSON event
// format as the data with content-type application/cloudevents+json.
func (h *Handler) cloudEvent(ctx context.Context, rec *handlers.Record[handlers.Row], msg *pubsub.Message) error {
	typ, _ := eventType(rec.Value)
	ev := ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, msg.Data)
	if h.envelope.Mode() == cloudevent.Structured {
		data, err := json.Marshal(ev)
		if err != nil {
			return handlers.Permanent(fmt.Errorf("pubsub: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		msg.Data = data
		msg.Attributes[contentTypeAttr] = ceformat.StructuredContentType
		return nil
	}
	for _, a := range ev.Attributes() {
		msg.Attributes["ce-"+a.Name] = a.Value
	}
	if ev.DataContentType != "" {
		msg.Attributes[contentTypeAttr] = ev.DataContentType
	}
	return nil
}
