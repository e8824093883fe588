package webhook

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/inorder-dev/inorder/handlers"
)

// envelope is the default request body; the field order is the documented format.
type envelope[T any] struct {
	Process   string `json:"process"`
	ID        string `json:"id"`
	CreatedAt string `json:"created_at"`
	Key       string `json:"key,omitempty"`
	Attempt   int    `json:"attempt"`
	Record    T      `json:"record"`
}

// body returns the request body for rec: the envelope, or the body column's JSON as it is. An error is
// permanent: the same record gives the same error on every attempt.
func (h *Handler[T]) body(rec *handlers.Record[T]) ([]byte, error) {
	if h.bodyColumn == "" && h.envelope != nil { // the record is the event's data
		body, err := json.Marshal(rec.Value)
		if err != nil {
			return nil, handlers.Permanent(fmt.Errorf("webhook: encode record %s as JSON: %w", rec.ID, err))
		}
		return body, nil
	}
	if h.bodyColumn == "" {
		body, err := json.Marshal(envelope[T]{
			Process:   rec.Process,
			ID:        rec.ID,
			CreatedAt: rec.CreatedAt.UTC().Format(time.RFC3339Nano),
			Key:       rec.Key,
			Attempt:   rec.Attempt,
			Record:    rec.Value,
		})
		if err != nil {
			return nil, handlers.Permanent(fmt.Errorf("webhook: encode record %s as JSON: %w", rec.ID, err))
		}
		return body, nil
	}
	row := any(rec.Value).(handlers.Row) // New refuses a BodyColumn for any other type
	v, ok := row.Get(h.bodyColumn)
	if !ok {
		return nil, handlers.Permanent(fmt.Errorf("webhook: record %s has no column %q for the body: select it",
			rec.ID, h.bodyColumn))
	}
	var body []byte
	switch x := v.(type) {
	case json.RawMessage: // json and jsonb
		body = x
	case string: // text, varchar
		body = []byte(x)
	case []byte: // bytea
		body = x
	case nil:
		return nil, handlers.Permanent(fmt.Errorf("webhook: record %s: column %q is NULL, not a JSON body",
			rec.ID, h.bodyColumn))
	default:
		return nil, handlers.Permanent(fmt.Errorf("webhook: record %s: column %q holds a %T, not a JSON body: "+
			"use a json, jsonb or text column", rec.ID, h.bodyColumn, v))
	}
	if !json.Valid(body) {
		var x any
		err := json.Unmarshal(body, &x) // for the reason
		return nil, handlers.Permanent(fmt.Errorf("webhook: record %s: column %q is not valid JSON: %v",
			rec.ID, h.bodyColumn, err))
	}
	return body, nil
}
