package webhook_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers/webhook"
)

// whsecKey is the key of whsecSecret, a secret in the Standard Webhooks form.
var whsecKey = []byte("0123456789abcdef0123456789abcdef")

var whsecSecret = "whsec_" + base64.StdEncoding.EncodeToString(whsecKey)

func TestStandardWebhooksSignatureVerifiesWithTheOfficialLibrary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		secret []byte // as configured
		verify func() (*standardwebhooks.Webhook, error)
	}{
		{"whsec_ secret", []byte(whsecSecret), func() (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhook(whsecSecret)
		}},
		{"raw key", []byte("a raw key of any bytes"), func() (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhookRaw([]byte("a raw key of any bytes"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, status(http.StatusOK, ""))
			h := newHandler(t, rc.srv.URL, func(c *webhook.Config) {
				c.Secret, c.Signature = tc.secret, webhook.SignatureStandardWebhooks
			})
			before := time.Now()
			require.NoError(t, h.Handle(context.Background(), record("42", 3)))
			got := rc.requests()
			require.Len(t, got, 1)
			hd, body := got[0].Header, got[0].Body

			wh, err := tc.verify()
			require.NoError(t, err)
			require.NoError(t, wh.Verify(body, hd))
			require.Equal(t, "booking_webhook:42", hd.Get(standardwebhooks.HeaderWebhookID), "the message id is the idempotency key")
			require.Equal(t, hd.Get(webhook.IdempotencyKeyHeader), hd.Get("webhook-id"))
			ts, err := strconv.ParseInt(hd.Get("webhook-timestamp"), 10, 64)
			require.NoError(t, err)
			require.InDelta(t, before.Unix(), ts, 2)
			require.Regexp(t, `^v1,[A-Za-z0-9+/]{43}=$`, hd.Get("webhook-signature"))
			require.Empty(t, hd.Values(webhook.SignatureHeader), "one scheme at a time")

			// The library refuses what it should: a changed body, another id, another secret.
			tampered := []byte(strings.Replace(string(body), `"amount":100`, `"amount":900`, 1))
			require.ErrorIs(t, wh.Verify(tampered, hd), standardwebhooks.ErrNoMatchingSignature)
			other := hd.Clone()
			other.Set("webhook-id", "booking_webhook:43")
			require.ErrorIs(t, wh.Verify(body, other), standardwebhooks.ErrNoMatchingSignature)
			wrong, err := standardwebhooks.NewWebhookRaw([]byte("another key"))
			require.NoError(t, err)
			require.ErrorIs(t, wrong.Verify(body, hd), standardwebhooks.ErrNoMatchingSignature)
		})
	}
}
