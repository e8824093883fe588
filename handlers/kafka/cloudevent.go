package kafka

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

// contentTypeHeader is the header the Kafka binding carries a message's content type in.
const contentTypeHeader = "content-type"

// cloudEvent turns r, rec's record, into its CloudEvent as the Kafka binding says: in binary mode ce_
// headers and the data content type in content-type (3.2), in structured mode the JSON event format as
// the value with content-type application/cloudevents+json (3.3). The key stays the record's key.
func (h *Handler) cloudEvent(ctx context.Context, rec *handlers.Record[handlers.Row], r *kgo.Record) error {
	typ, _ := rec.Value.Text(h.typeColumns...)
	ev := ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, r.Value)
	c := headerCarrier{r}
	if h.envelope.Mode() == cloudevent.Structured {
		v, err := json.Marshal(ev)
		if err != nil {
			return handlers.Permanent(fmt.Errorf("kafka: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		r.Value = v
		c.Set(contentTypeHeader, ceformat.StructuredContentType)
		return nil
	}
	for _, a := range ev.Attributes() {
		c.Set("ce_"+a.Name, a.Value)
	}
	if ev.DataContentType != "" {
		c.Set(contentTypeHeader, ev.DataContentType)
	}
	return nil
}
