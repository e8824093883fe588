package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/billingtest"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// billingKey is the API key of the billing API the tests call; no output may ever show it, nor any part
// of the other secrets named "topsecret".
const billingKey = "sk_test_topsecret_51HxyzABCdef"

func TestWebhookFlagErrorsAreOneLineAndShowNoSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := append([]string{
		"BILLING_KEY=" + billingKey,
		"BILLING_KEY_NL=sk_test_topsecret\nX-Injected: 1",
		"SIGNING_SECRET=plain-topsecret",
		"WHSEC_BAD_BASE64=whsec_topsecret!!",
	}, b.env...)
	webhookArgs := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "webhook", "--webhook-url", "http://127.0.0.1:1/v1/usage"}, extra...)...)
	}
	none := func(extra ...string) []string {
		return webhookArgs(append([]string{"--webhook-signature", "none"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"header naming an unset variable", none("--webhook-header", "Authorization=Bearer ${INORDER_TEST_UNSET_KEY}"),
			"inorder run: --webhook-header Authorization: environment variable INORDER_TEST_UNSET_KEY is not set or empty"},
		{"the second header naming an unset variable", none("--webhook-header", "Authorization: Bearer ${BILLING_KEY}",
			"--webhook-header", "X-Account=${INORDER_TEST_UNSET_ACCOUNT}"),
			"--webhook-header X-Account: environment variable INORDER_TEST_UNSET_ACCOUNT is not set or empty"},
		{"variable with a line break", none("--webhook-header", "Authorization=Bearer ${BILLING_KEY_NL}"),
			"--webhook-header Authorization: environment variable BILLING_KEY_NL holds a line break or another control character"},
		{"header without a name", none("--webhook-header", "Bearer sk_test_topsecret"),
			`--webhook-header #1 has no "=": give Name=value`},
		{"header with a bad name", none("--webhook-header", "Bearer sk_test_topsecret=1"),
			`--webhook-header #1: what comes before the "=" is not an HTTP header name`},
		{"unclosed variable", none("--webhook-header", "Authorization=Bearer ${BILLING_KEY"),
			`--webhook-header Authorization: a "${" has no closing "}"`},
		{"empty header", none("--webhook-header", "Authorization="), "--webhook-header Authorization has an empty value"},
		{"unknown scheme", webhookArgs("--webhook-signature", "hmac", "--webhook-secret-env", "SIGNING_SECRET"),
			`--webhook-signature must be inorder, standard-webhooks or none, got "hmac"`},
		{"a secret with no signature", none("--webhook-secret-env", "SIGNING_SECRET"),
			"--webhook-secret-env contradicts --webhook-signature none: nothing is signed"},
		{"a signature with no secret", webhookArgs("--webhook-header", "Authorization=Bearer ${BILLING_KEY}"),
			"--handler webhook needs --webhook-url and --webhook-secret-env (or --webhook-signature none)"},
		{"standard webhooks with a plain secret", webhookArgs("--webhook-signature", "standard-webhooks",
			"--webhook-secret-env", "SIGNING_SECRET"),
			"--webhook-secret-env names SIGNING_SECRET, which does not hold a Standard Webhooks secret: whsec_ followed by the key in base64"},
		{"standard webhooks with bad base64", webhookArgs("--webhook-signature", "standard-webhooks",
			"--webhook-secret-env", "WHSEC_BAD_BASE64"),
			"--webhook-secret-env names WHSEC_BAD_BASE64, which does not hold a Standard Webhooks secret"},
		{"body column not selected", none("--columns", "id,aggregate_id", "--webhook-body-column", "details"),
			`--webhook-body-column "details" is not among --columns`},
		{"bad idempotency header", none("--webhook-idempotency-header", "Idempotency Key"),
			`--webhook-idempotency-header "Idempotency Key" is not an HTTP header name`},
		{"idempotency header taken", none("--webhook-idempotency-header", "Content-Type"),
			`webhook: Config.IdempotencyHeader "Content-Type" is a header the handler sets for another purpose`},
		{"a URL without its scheme", runArgs("--handler", "webhook", "--webhook-signature", "none", "--webhook-url",
			"127.0.0.1:8092/charge"),
			`--webhook-url "127.0.0.1:8092/charge" has no scheme: start it with http:// or https://, as in "http://127.0.0.1:8092/charge"`},
		{"a URL of another scheme", runArgs("--handler", "webhook", "--webhook-signature", "none", "--webhook-url",
			"ftp://billing.example.com/charge"), "--webhook-url must be an http:// or https:// URL with a host"},
		{"webhook flags without the webhook handler", runArgs("--webhook-header", "Authorization=Bearer ${BILLING_KEY}"),
			"--webhook-* and --pubsub-* flags need --handler webhook or pubsub"},
		{"webhook signature without the webhook handler", runArgs("--webhook-signature", "none"),
			"--webhook-* and --pubsub-* flags need --handler webhook or pubsub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, env, tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
			require.NotContains(t, stderr, "topsecret", "no secret in the error")
		})
	}
}

// runBounded runs the binary like runBinary, but stops it after 20 seconds: a bad flag it failed to
// refuse would otherwise leave it running, delivering.
func runBounded(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "inorder did not exit: it took the flags; stderr: %s", stderr.String())
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// usageOutbox adds a usage outbox to b's database: n events over customers, event g (row g) with
// quantity g, each carrying in its payload the body the billing API takes.
func usageOutbox(t *testing.T, b *bundle, n, customers int) {
	t.Helper()
	b.db.Exec(t, fmt.Sprintf(`CREATE TABLE usage_outbox (
			id         bigserial PRIMARY KEY,
			customer   text NOT NULL,
			payload    jsonb NOT NULL,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON usage_outbox (created_at, id);
		INSERT INTO usage_outbox (customer, payload)
		SELECT 'cus_' || (g %% %[2]d), jsonb_build_object('customer', 'cus_' || (g %% %[2]d), 'quantity', g, 'event_id', 'evt_' || g)
		FROM generate_series(1, %[1]d) g`, n, customers))
	pgtest.AddClock(t, b.db, "usage_outbox")
}

func billingArgs(process, url string) []string {
	return []string{"run", "--process", process, "--table", "usage_outbox", "--start-from", "beginning", "--key-column", "customer",
		"--poll-interval", "20ms", "--retry-min", "20ms", "--retry-max", "100ms",
		"--handler", "webhook", "--webhook-url", url + "/v1/usage", "--webhook-signature", "none",
		"--webhook-header", "Authorization=Bearer ${BILLING_KEY}", "--webhook-header", "X-Api-Version: 2024-06-20",
		"--webhook-idempotency-header", "X-Idempotency-Key", "--webhook-body-column", "payload",
		"--webhook-max-in-flight", "8"}
}

// TestWebhookCallsABillingAPIWithAKeyFromTheEnvironment: the CLI delivers an outbox to a billing API that
// demands a bearer token, an idempotency key under its own name and its own body, eight requests at once:
// the API accepts every record, in order per customer. Another process given a revoked key halts on its
// first record with a clear error, and no output of either, nor status, shows a key.
func TestWebhookCallsABillingAPIWithAKeyFromTheEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	usageOutbox(t, b, n, 10)
	api := billingtest.Start(t, billingtest.Config{APIKey: billingKey, IdempotencyHeader: "X-Idempotency-Key",
		MaxLatency: 5 * time.Millisecond})

	good := startBinary(t, append([]string{"BILLING_KEY=" + billingKey}, b.env...), billingArgs("billing", api.URL)...)
	require.Eventually(t, func() bool { return len(api.Accepted()) == n }, 30*time.Second, 10*time.Millisecond, good.logs())
	require.NoError(t, api.OrderPerCustomer())
	keys := map[string]bool{}
	for _, e := range api.Accepted() {
		require.Equal(t, fmt.Sprintf("billing:%d", e.Quantity), e.IdempotencyKey, "row g carries event g")
		keys[e.IdempotencyKey] = true
	}
	require.Len(t, keys, n)
	requests, _, most := api.Stats()
	require.Equal(t, n, requests, "nothing refused or sent twice")
	require.Greater(t, most, 1, "records of different customers in flight together")
	require.LessOrEqual(t, most, 8)
	require.NoError(t, good.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, good.wait(t), good.logs())

	const revoked = "sk_test_topsecret_revoked_0000"
	bad := startBinary(t, append([]string{"BILLING_KEY=" + revoked}, b.env...), billingArgs("billing_revoked", api.URL)...)
	var rep statusDoc
	require.Eventually(t, func() bool {
		_, stdout, _ := runBinary(t, b.env, "status", "--json", "--process", "billing_revoked")
		return json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 &&
			rep.Processes[0].Halt != nil && rep.Processes[0].Halt.Attempts >= 2
	}, 30*time.Second, 20*time.Millisecond, bad.logs())
	// A revoked key refuses every record: the sink's outage, which the stream waits out.
	halt := rep.Processes[0].Halt
	require.Equal(t, "sink unavailable", rep.Processes[0].State)
	require.Equal(t, "1", halt.RecordID)
	require.False(t, halt.Permanent)
	require.Nil(t, halt.HaltedAt, "never halted")
	require.NotNil(t, halt.Unavailable)
	require.Contains(t, *halt.Unavailable, "the credentials")
	require.NotNil(t, halt.Status)
	require.Equal(t, http.StatusUnauthorized, *halt.Status)
	require.Equal(t, `webhook POST `+api.URL+`/v1/usage: 401 Unauthorized: `+
		`{"error":{"message":"Invalid API Key provided: [redacted]"}}`, halt.Error)
	require.Nil(t, rep.Processes[0].Position.ID, "the position did not move")
	code, text, _ := runBinary(t, b.env, "status", "--process", "billing_revoked")
	require.Zero(t, code)
	require.Contains(t, text, "billing_revoked waits for the sink")
	require.NotContains(t, text, "inorder skip")
	require.NoError(t, bad.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, bad.wait(t), bad.logs())

	_, jsonStatus, _ := runBinary(t, b.env, "status", "--json")
	for name, out := range map[string]string{"logs": good.logs(), "revoked logs": bad.logs(), "status": text,
		"status --json": jsonStatus, "stdout": strings.Join(append(good.output(), bad.output()...), "\n")} {
		require.NotContains(t, out, "topsecret", "%s show a key", name)
	}
}

// TestWebhookSignsForStandardWebhooks: the CLI with --webhook-signature standard-webhooks and a whsec_
// secret from the environment; a receiver written with the official library verifies every request.
func TestWebhookSignsForStandardWebhooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 60, "1")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	var mu sync.Mutex
	var verified []string
	var refused []error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			refused = append(refused, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		verified = append(verified, r.Header.Get("webhook-id"))
	}))
	t.Cleanup(srv.Close)
	p := startBinary(t, append([]string{"WEBHOOK_SECRET=" + secret}, b.env...), runArgs("--handler", "webhook",
		"--webhook-url", srv.URL, "--webhook-signature", "standard-webhooks", "--webhook-secret-env", "WEBHOOK_SECRET",
		"--webhook-max-in-flight", "4")...)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(verified)+len(refused) >= 60
	}, 30*time.Second, 10*time.Millisecond, p.logs())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, refused, "every request verifies")
	require.Len(t, verified, 60)
	require.Contains(t, verified, "booking_sms:1")
	require.NotContains(t, p.logs(), "MfKQ9r8G")
}
