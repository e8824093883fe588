package webhook_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/billingtest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// outbox is a database with a usage outbox: each row carries, in its payload column, the body a billing
// API expects for it, numbered so that a customer's events are in increasing quantity.
type outbox struct {
	db *processortest.DB
}

func setupOutbox(t *testing.T) *outbox {
	t.Helper()
	db := processortest.NewDB(t, nil)
	db.Exec(t, `CREATE TABLE usage_outbox (
			id         bigserial PRIMARY KEY,
			customer   text NOT NULL,
			payload    jsonb NOT NULL,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON usage_outbox (created_at, id)`)
	sinktest.AddClock(t, db, "usage_outbox")
	return &outbox{db: db}
}

// insert adds n usage events over the given number of customers; event g has quantity g.
func (o *outbox) insert(t *testing.T, n, customers int) {
	t.Helper()
	o.db.Exec(t, fmt.Sprintf(`INSERT INTO usage_outbox (customer, payload)
		SELECT 'cus_' || (g %% %[2]d), jsonb_build_object('customer', 'cus_' || (g %% %[2]d), 'quantity', g, 'event_id', 'evt_' || g)
		FROM generate_series(1, %[1]d) g`, n, customers))
}

// run delivers the outbox to h with up to inFlight requests at once, keyed by customer.
func (o *outbox) run(t *testing.T, h handlers.Handler[handlers.Row], inFlight int) {
	t.Helper()
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "billing",
		ClientConfig: processor.ClientConfig{ConnConfig: o.db.ConnConfig(t)},
		Source:       inordertype.Source{Table: "usage_outbox", KeyColumn: "customer"},
		Handler:      h,
		MaxInFlight:  inFlight,
		PollInterval: 10 * time.Millisecond,
		RetryMin:     10 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	processortest.Start(t, p, nil)
}

// billingHandler calls a billing API the way its documentation says: a bearer token, an idempotency key
// under the API's own name, the body from the payload column, no signature.
func billingHandler(t *testing.T, api *billingtest.API, key string) *webhook.Handler[handlers.Row] {
	t.Helper()
	h, err := webhook.New[handlers.Row](webhook.Config{
		URL:               api.URL + "/v1/usage",
		Signature:         webhook.SignatureNone,
		Headers:           http.Header{"Authorization": {"Bearer " + key}},
		IdempotencyHeader: "X-Idempotency-Key",
		BodyColumn:        "payload",
	})
	require.NoError(t, err)
	return h
}

func TestBillingAPIAcceptsEveryRecordInOrderPerCustomer(t *testing.T) {
	t.Parallel()
	const n, customers, window = 400, 12, 16
	o := setupOutbox(t)
	o.insert(t, n, customers)
	api := billingtest.Start(t, billingtest.Config{APIKey: apiKey, IdempotencyHeader: "X-Idempotency-Key",
		MaxLatency: 5 * time.Millisecond})
	o.run(t, billingHandler(t, api, apiKey), window)
	processortest.WaitCaughtUp(t, o.db, "billing", &processortest.WaitOpts{Timeout: 30 * time.Second})

	got := api.Accepted()
	require.Len(t, got, n, "every record accepted")
	require.NoError(t, api.OrderPerCustomer())
	for _, e := range got {
		// Event g is row g: its idempotency key is the process and the row's id.
		require.Equal(t, "billing:"+strconv.FormatInt(e.Quantity, 10), e.IdempotencyKey)
		require.Equal(t, "evt_"+strconv.FormatInt(e.Quantity, 10), e.EventID)
	}
	requests, replays, most := api.Stats()
	require.Equal(t, n, requests, "each record sent once: nothing was refused or retried")
	require.Zero(t, replays)
	require.Greater(t, most, 1, "records of different customers were in flight together")
	require.LessOrEqual(t, most, window)
	t.Logf("%d events over %d customers, at most %d in flight", n, customers, most)
}

// TestBillingAPIRefusingTheKeyIsASinkOutage: a revoked key refuses every record, so the stream waits for
// the sink, halting and parking nothing, and says to check the credentials.
func TestBillingAPIRefusingTheKeyIsASinkOutage(t *testing.T) {
	t.Parallel()
	o := setupOutbox(t)
	o.insert(t, 5, 2)
	api := billingtest.Start(t, billingtest.Config{APIKey: apiKey, IdempotencyHeader: "X-Idempotency-Key"})
	const wrongKey = "sk_test_revoked00000000000000"
	o.run(t, billingHandler(t, api, wrongKey), 4)
	halt := processortest.WaitSinkUnavailable(t, o.db, "billing", nil)

	require.Equal(t, "1", halt.RecordID, "waiting on the first record")
	require.False(t, halt.Permanent, "the key's refusal, not the record's")
	require.True(t, halt.Retrying(), "never halted")
	require.Contains(t, halt.Unavailable, "the credentials")
	require.Equal(t, http.StatusUnauthorized, halt.Status)
	require.Equal(t, `webhook POST `+api.URL+`/v1/usage: 401 Unauthorized: `+
		`{"error":{"message":"Invalid API Key provided: [redacted]"}}`, halt.Error)
	require.NotContains(t, halt.Error, wrongKey[8:], "the key never reaches the cursor row")
	require.Empty(t, api.Accepted())
	require.Positive(t, api.Refused(http.StatusUnauthorized))
}
