package jetstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

// cloudEvent turns msg, rec's message, into its CloudEvent as the NATS binding says: the JSON event
// format as the data (3), the binding's only content mode, with the headers the handler sets anyway
// (Nats-Msg-Id among them) and Content-Type application/cloudevents+json.
func (h *Handler) cloudEvent(ctx context.Context, rec *handlers.Record[handlers.Row], msg *nats.Msg) error {
	typ, _ := rec.Value.Text(h.typeColumns...)
	data, err := json.Marshal(ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, msg.Data))
	if err != nil {
		return handlers.Permanent(fmt.Errorf("jetstream: encode record %s as a CloudEvent: %w", rec.ID, err))
	}
	msg.Data = data
	msg.Header.Set("Content-Type", ceformat.StructuredContentType)
	return nil
}
