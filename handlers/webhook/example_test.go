package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
)

// A receiver checks the signature against the exact body bytes before it trusts anything in them.
func ExampleVerify() {
	secret := []byte("shared-secret")
	body := []byte(`{"process":"booking_webhook","id":"42","created_at":"2024-05-01T10:00:00Z","attempt":1,"record":{"id":42}}`)
	signedAt := time.Unix(1714557600, 0)
	header := webhook.Sign(secret, signedAt, body)
	fmt.Println(header)

	now := signedAt.Add(30 * time.Second)
	fmt.Println(webhook.Verify(secret, header, body, 5*time.Minute, now))

	tampered := []byte(`{"process":"booking_webhook","id":"43"}`)
	fmt.Println(errors.Is(webhook.Verify(secret, header, tampered, 5*time.Minute, now), webhook.ErrBadSignature))

	replayed := signedAt.Add(time.Hour)
	fmt.Println(errors.Is(webhook.Verify(secret, header, body, 5*time.Minute, replayed), webhook.ErrSignatureExpired))
	// Output:
	// t=1714557600,v1=4ce0002d0097b651e78a66936851ad9151e26736449bc8307ae8070170130ec0
	// <nil>
	// true
	// true
}

// A receiver verifies the request, then decodes the body VerifyRequest put back, and answers 2xx only once
// the effect is stored; a key it has seen already gets a 2xx without acting again.
func ExampleVerifyRequest() {
	secret := []byte("shared-secret")
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := webhook.VerifyRequest(secret, r, 5*time.Minute); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var msg struct {
			Process string          `json:"process"`
			ID      string          `json:"id"`
			Attempt int             `json:"attempt"`
			Record  json.RawMessage `json:"record"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Printf("received %s:%s attempt %d: %s\n", msg.Process, msg.ID, msg.Attempt, msg.Record)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	h, err := webhook.New[handlers.Row](webhook.Config{URL: receiver.URL + "/bookings", Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = h.Handle(context.Background(), &handlers.Record[handlers.Row]{
		Process:   "booking_webhook",
		ID:        "42",
		CreatedAt: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		Attempt:   1,
		Value:     handlers.Row{Columns: []string{"id", "amount"}, Values: []any{int64(42), int32(100)}},
	})
	fmt.Println("handle:", err)
	// Output:
	// received booking_webhook:42 attempt 1: {"id":42,"amount":100}
	// handle: <nil>
}

// A third-party API takes its own JSON body, a bearer token and an idempotency key, and authenticates the
// sender by the token: the body is the outbox row's payload column, the token a header (in the CLI,
// --webhook-header 'Authorization=Bearer ${BILLING_KEY}'), and nothing is signed.
func ExampleConfig_thirdPartyAPI() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_test_123" {
			http.Error(w, `{"error":"invalid api key"}`, http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s\n", r.Header.Get("Idempotency-Key"), body)
	}))
	defer api.Close()

	h, err := webhook.New[handlers.Row](webhook.Config{
		URL:        api.URL + "/v1/usage",
		Signature:  webhook.SignatureNone,
		Headers:    http.Header{"Authorization": {"Bearer sk_test_123"}},
		BodyColumn: "payload",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = h.Handle(context.Background(), &handlers.Record[handlers.Row]{
		Process: "billing",
		ID:      "7",
		Attempt: 1,
		Value: handlers.Row{
			Columns: []string{"id", "customer", "payload"},
			Values:  []any{int64(7), "cus_1", json.RawMessage(`{"customer":"cus_1","quantity":3}`)},
		},
	})
	fmt.Println("handle:", err)
	// Output:
	// billing:7 {"customer":"cus_1","quantity":3}
	// handle: <nil>
}

// A receiver written with stripe-go verifies the default signature, SignatureInorder, with
// webhook.ValidatePayload, given the Inorder-Signature header and the shared secret.
func ExampleSignatureScheme_stripe() {
	const secret = "shared-secret"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := stripewebhook.ValidatePayload(body, r.Header.Get("Inorder-Signature"), secret); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Println("verified", r.Header.Get("Idempotency-Key"))
	}))
	defer receiver.Close()

	h, err := webhook.New[handlers.Row](webhook.Config{URL: receiver.URL, Secret: []byte(secret)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("handle:", h.Handle(context.Background(), exampleRecord()))
	// Output:
	// verified booking_webhook:42
	// handle: <nil>
}

// A receiver written with the official Standard Webhooks library verifies SignatureStandardWebhooks with
// the same whsec_ secret the handler was given.
func ExampleSignatureScheme_standardWebhooks() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		fmt.Println(err)
		return
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Println("verified", r.Header.Get("webhook-id"))
	}))
	defer receiver.Close()

	h, err := webhook.New[handlers.Row](webhook.Config{URL: receiver.URL, Secret: []byte(secret),
		Signature: webhook.SignatureStandardWebhooks})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("handle:", h.Handle(context.Background(), exampleRecord()))
	// Output:
	// verified booking_webhook:42
	// handle: <nil>
}

func exampleRecord() *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{
		Process:   "booking_webhook",
		ID:        "42",
		CreatedAt: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		Attempt:   1,
		Value:     handlers.Row{Columns: []string{"id", "amount"}, Values: []any{int64(42), int32(100)}},
	}
}
