package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
)

// cloudEvent makes rec's CloudEvent of data, the request's body without an envelope, and returns the
// request's body, its content type and, in binary mode, the ce- headers (HTTP binding, 3.1 and 3.2).
func (h *Handler[T]) cloudEvent(ctx context.Context, rec *handlers.Record[T], data []byte) ([]byte, string, http.Header, error) {
	var typ string
	if row, ok := any(rec.Value).(handlers.Row); ok {
		typ, _ = row.Text("type", "event_type")
	}
	ev := cloudevent.Of(ctx, h.envelope, rec, typ, data)
	if h.envelope.Mode() == cloudevent.Structured {
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, "", nil, handlers.Permanent(fmt.Errorf("webhook: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		return body, cloudevent.StructuredContentType, nil, nil
	}
	hdr := http.Header{}
	for _, a := range ev.Attributes() {
		hdr.Set("ce-"+a.Name, cloudevent.HTTPHeaderValue(a.Value))
	}
	return data, ev.DataContentType, hdr, nil
}
