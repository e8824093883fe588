package webhook_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/internal/harness/billingtest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// verifyingReceiver is a receiver that verifies every request with a library of its own, as a real one
// would, answers 401 to any it cannot verify, and keeps the record id and key of those it verified.
type verifyingReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	verified []windowReq
	refused  []error
}

// newVerifyingReceiver starts a receiver; verify checks a request and its body and returns the record's
// id and key.
func newVerifyingReceiver(t *testing.T, verify func(r *http.Request, body []byte) (id, key string, err error)) *verifyingReceiver {
	v := &verifyingReceiver{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		var id, key string
		if err == nil {
			id, key, err = verify(r, body)
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if err != nil {
			v.refused = append(v.refused, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		v.verified = append(v.verified, windowReq{id: id, key: key, status: http.StatusOK})
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *verifyingReceiver) results() ([]windowReq, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]windowReq(nil), v.verified...), errors.Join(v.refused...)
}

// checkAllVerified requires that the receiver verified every one of n records, once each, none refused,
// first acceptances in order per key.
func checkAllVerified(t *testing.T, v *verifyingReceiver, n int) {
	t.Helper()
	got, refused := v.results()
	require.NoError(t, refused, "every request verifies")
	require.Len(t, got, n, "every record, once")
	checkOrderPerKey(t, got)
}

// TestStripeValidatePayloadVerifiesEveryRequest: a receiver written against stripe-go, which knows nothing
// of inorder, verifies the default signature of every request of a windowed stream with
// webhook.ValidatePayload(body, header, secret) unchanged.
func TestStripeValidatePayloadVerifiesEveryRequest(t *testing.T) {
	t.Parallel()
	const n = 300
	o := setupOutbox(t)
	o.insert(t, n, 10)
	const signingSecret = "whsec_stripe_style_secret_0123"
	v := newVerifyingReceiver(t, func(r *http.Request, body []byte) (string, string, error) {
		if err := stripewebhook.ValidatePayload(body, r.Header.Get("Inorder-Signature"), signingSecret); err != nil {
			return "", "", err
		}
		var env struct{ ID, Key string }
		err := json.Unmarshal(body, &env)
		return env.ID, env.Key, err
	})
	h, err := webhook.New[handlers.Row](webhook.Config{URL: v.srv.URL, Secret: []byte(signingSecret)})
	require.NoError(t, err)
	o.run(t, h, 16)
	processortest.WaitCaughtUp(t, o.db, "billing", &processortest.WaitOpts{Timeout: 30 * time.Second})
	checkAllVerified(t, v, n)
}

// TestStandardWebhooksLibraryVerifiesEveryRequest: a receiver written against the official Standard
// Webhooks library verifies every request of a windowed stream whose body is the payload column.
func TestStandardWebhooksLibraryVerifiesEveryRequest(t *testing.T) {
	t.Parallel()
	const n = 300
	o := setupOutbox(t)
	o.insert(t, n, 10)
	wh, err := standardwebhooks.NewWebhook(whsecSecret)
	require.NoError(t, err)
	v := newVerifyingReceiver(t, func(r *http.Request, body []byte) (string, string, error) {
		if err := wh.Verify(body, r.Header); err != nil {
			return "", "", err
		}
		var u billingtest.Usage
		if err := json.Unmarshal(body, &u); err != nil {
			return "", "", err
		}
		id, ok := strings.CutPrefix(r.Header.Get(standardwebhooks.HeaderWebhookID), "billing:")
		if !ok || id != strconv.FormatInt(u.Quantity, 10) {
			return "", "", errors.New("webhook-id " + r.Header.Get(standardwebhooks.HeaderWebhookID) + " is not this event's row")
		}
		return id, u.Customer, nil
	})
	h, err := webhook.New[handlers.Row](webhook.Config{URL: v.srv.URL, Secret: []byte(whsecSecret),
		Signature: webhook.SignatureStandardWebhooks, BodyColumn: "payload"})
	require.NoError(t, err)
	o.run(t, h, 16)
	processortest.WaitCaughtUp(t, o.db, "billing", &processortest.WaitOpts{Timeout: 30 * time.Second})
	checkAllVerified(t, v, n)
}
