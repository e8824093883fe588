package webhook_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

const apiKey = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"

func TestNoSignatureSendsTheConfiguredHeaders(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK, ""))
	h, err := webhook.New[handlers.Row](webhook.Config{
		URL:       rc.srv.URL,
		Signature: webhook.SignatureNone,
		Headers:   http.Header{"Authorization": {"Bearer " + apiKey}, "Stripe-Version": {"2024-06-20"}},
	})
	require.NoError(t, err)
	require.NoError(t, h.Handle(context.Background(), record("42", 1)))
	got := rc.requests()
	require.Len(t, got, 1)
	hd := got[0].Header
	require.Equal(t, "Bearer "+apiKey, hd.Get("Authorization"))
	require.Equal(t, "2024-06-20", hd.Get("Stripe-Version"))
	require.Equal(t, "booking_webhook:42", hd.Get(webhook.IdempotencyKeyHeader))
	for _, name := range []string{webhook.SignatureHeader, "webhook-id", "webhook-timestamp",
		"webhook-signature"} {
		require.Empty(t, hd.Values(name), "no signature: %s", name)
	}
	require.Contains(t, string(got[0].Body), `"process":"booking_webhook","id":"42"`, "the envelope by default")
}

// TestErrorBodyHidesCredentials: an API that echoes the key it refused (some do) gets it redacted in the
// error, which goes to the cursor row, the logs and status.
func TestErrorBodyHidesCredentials(t *testing.T) {
	t.Parallel()
	echo := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		_, _ = w.Write([]byte(`{"error":"Invalid API Key provided: ` + key + `", "header": "` + r.Header.Get("Authorization") +
			`", "secret": "` + string(secret) + `", "version": "v2"}`))
	}
	rc := newReceiver(t, echo)
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) {
		c.Headers = http.Header{"Authorization": {"Bearer " + apiKey}, "X-Version": {"v2"}}
	})
	err := h.Handle(context.Background(), record("1", 1))
	_, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "a refused key is every record's: %v", err)
	require.Equal(t, "webhook POST "+rc.srv.URL+`: 401 Unauthorized: {"error":"Invalid API Key provided: [redacted]", `+
		`"header": "[redacted]", "secret": "[redacted]", "version": "v2"}`, err.Error(),
		"credentials hidden; a short value is ordinary text")

	// The excerpt's limit cuts through the key, which starts at byte 36: no part of it shows.
	for limit := 36; limit <= 36+len(apiKey); limit++ {
		h := newHandler(t, rc.srv.URL, func(c *webhook.Config) {
			c.Headers = http.Header{"Authorization": {"Bearer " + apiKey}}
			c.MaxErrorBody = limit
		})
		err := h.Handle(context.Background(), record("1", 1))
		require.NotContains(t, err.Error(), apiKey[:4], "limit %d", limit)
	}
}

func TestNewChecksHTTPOptions(t *testing.T) {
	t.Parallel()
	const url = "https://api.example.com/v1/usage"
	for _, tc := range []struct {
		cfg  webhook.Config
		want string
	}{
		{webhook.Config{URL: url, Secret: secret, Signature: "hmac"},
			`webhook: Config.Signature "hmac" is none of inorder, standard-webhooks and none`},
		{webhook.Config{URL: url, Signature: webhook.SignatureStandardWebhooks},
			"webhook: Config.Secret is required: it is the HMAC key receivers verify requests with"},
		{webhook.Config{URL: url, Secret: secret, Signature: webhook.SignatureNone},
			"webhook: Config.Secret is set but Config.Signature is none: nothing would be signed with it"},
		{webhook.Config{URL: url, Secret: []byte("whsec_hunter2!!"), Signature: webhook.SignatureStandardWebhooks},
			"webhook: Config.Secret starts with whsec_ but the rest is not standard base64"},
		{webhook.Config{URL: url, Secret: []byte("whsec_"), Signature: webhook.SignatureStandardWebhooks},
			"webhook: Config.Secret is whsec_ with no key after it"},
		{webhook.Config{URL: url, Secret: secret, IdempotencyHeader: "Idempotency Key"},
			`webhook: Config.IdempotencyHeader "Idempotency Key" is not an HTTP header name`},
		{webhook.Config{URL: url, Secret: secret, IdempotencyHeader: "content-type"},
			`webhook: Config.IdempotencyHeader "content-type" is a header the handler sets for another purpose`},
		{webhook.Config{URL: url, Secret: secret, IdempotencyHeader: "Webhook-Id"},
			`webhook: Config.IdempotencyHeader "Webhook-Id" is a header the handler sets for another purpose`},
		{webhook.Config{URL: url, Secret: secret, Headers: http.Header{"Bad Name": {"x"}}},
			`webhook: Config.Headers has "Bad Name", which is not an HTTP header name`},
		{webhook.Config{URL: url, Secret: secret, Headers: http.Header{"Authorization": {"Bearer hunter2\r\nX-Evil: 1"}}},
			`webhook: Config.Headers["Authorization"] holds a line break or another control character`},
	} {
		_, err := webhook.New[handlers.Row](tc.cfg)
		require.EqualError(t, err, tc.want)
		require.NotContains(t, err.Error(), "hunter2", "no credential in the error")
	}

	_, err := webhook.New[map[string]any](webhook.Config{URL: url, Secret: secret, BodyColumn: "payload"})
	require.EqualError(t, err, "webhook: Config.BodyColumn needs a Handler[handlers.Row], not a Handler[map[string]interface {}]")
	_, err = webhook.New[handlers.Row](webhook.Config{URL: url, Signature: webhook.SignatureNone, BodyColumn: "payload",
		IdempotencyHeader: "X-Idempotency-Key", Headers: http.Header{"Authorization": {"Bearer " + apiKey + "\t"}}})
	require.NoError(t, err)
}
