package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
)

// cloudEvent makes rec's CloudEvent of data, the request's body without an envelope, and returns the
// request's body, its content type and, in binary mode, the ce- headers (HTTP binding, 3.1 and 3.2).
func (h *Handler[T]) cloudEvent(ctx context.Context, rec *handlers.Record[T], data []byte) ([]byte, string, http.Header, error) {
	var typ string
	if row, ok := any(rec.Value).(handlers.Row); ok {
		typ, _ = row.Text("type", "event_type")
	}
	ev := ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, data)
	if h.envelope.Mode() == cloudevent.Structured {
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, "", nil, handlers.Permanent(fmt.Errorf("webhook: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		return body, ceformat.StructuredContentType, nil, nil
	}
	hdr := http.Header{}
	for _, a := range ev.Attributes() {
		hdr.Set("ce-"+a.Name, httpHeaderValue(a.Value))
	}
	return data, ev.DataContentType, hdr, nil
}

// httpHeaderValue encodes an attribute's value for an HTTP header as the HTTP binding says (3.1.3.2):
// a space, a double quote, a percent sign and every character outside printable ASCII percent-encoded
// as UTF-8. Kafka headers, Pub/Sub attributes and AMQP properties carry values as they are.
func httpHeaderValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c > ' ' && c < 0x7f && c != '"' && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
