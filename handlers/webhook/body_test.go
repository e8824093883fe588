package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

// outboxRecord is an outbox row whose payload column holds the body a third-party API expects.
func outboxRecord(id string, payload any) *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{
		Process:   "billing",
		ID:        id,
		CreatedAt: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		Key:       "cus_1",
		Attempt:   2,
		Value: handlers.Row{
			Columns: []string{"id", "customer", "payload"},
			Values:  []any{int64(1), "cus_1", payload},
		},
	}
}

func TestBodyColumnIsSentAsIs(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK, ""))
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) {
		c.BodyColumn = "payload"
		c.IdempotencyHeader = "x-request-key"
	})
	ctx := context.Background()
	const usage = `{"customer": "cus_1", "quantity": 3}` // as the column holds it, spaces and all
	for _, v := range []any{
		json.RawMessage(usage), // json, jsonb
		usage,                  // text
		[]byte(usage),          // bytea
	} {
		require.NoError(t, h.Handle(ctx, outboxRecord("9", v)))
	}
	got := rc.requests()
	require.Len(t, got, 3)
	for _, g := range got {
		require.Equal(t, usage, string(g.Body), "the column's bytes, not the envelope")
		require.Equal(t, "application/json", g.Header.Get("Content-Type"))
		require.Equal(t, "billing:9", g.Header.Get("X-Request-Key"))
		require.Empty(t, g.Header.Values(webhook.IdempotencyKeyHeader), "the key goes under the configured name only")
		require.Equal(t, "2", g.Header.Get(webhook.AttemptHeader))
		require.NoError(t, webhook.Verify(secret, g.Header.Get(webhook.SignatureHeader), g.Body, time.Minute, time.Now()),
			"the signature covers the body sent")
	}
}

func TestBodyColumnWithoutJSONHaltsTheRecord(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK, ""))
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.BodyColumn = "payload" })
	for _, tc := range []struct {
		name  string
		value any
		want  string
	}{
		{"NULL", nil, `webhook: record 7: column "payload" is NULL, not a JSON body`},
		{"text that is not JSON", "quantity=3", `webhook: record 7: column "payload" is not valid JSON: invalid character 'q'`},
		{"empty text", "", `webhook: record 7: column "payload" is not valid JSON: unexpected end of JSON input`},
		{"two values", `{"a":1} {"b":2}`, `webhook: record 7: column "payload" is not valid JSON: invalid character '{' after top-level value`},
		{"bytea that is not JSON", []byte{0xff, 0x00}, `webhook: record 7: column "payload" is not valid JSON`},
		{"a number column", int64(3), `webhook: record 7: column "payload" holds a int64, not a JSON body: use a json, jsonb or text column`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.Handle(context.Background(), outboxRecord("7", tc.value))
			require.Error(t, err)
			require.True(t, handlers.IsPermanent(err), "the same record fails the same way every time: %v", err)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
	rec := outboxRecord("8", nil)
	rec.Value = handlers.Row{Columns: []string{"id"}, Values: []any{int64(8)}}
	err := h.Handle(context.Background(), rec)
	require.True(t, handlers.IsPermanent(err))
	require.EqualError(t, err, `permanent: webhook: record 8 has no column "payload" for the body: select it`)
	require.Empty(t, rc.requests(), "nothing was sent for a record without a body")
}
