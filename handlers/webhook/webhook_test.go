package webhook_test

import (
	"context"
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

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("test-secret-0123456789")

// seen is one request a test receiver got.
type seen struct {
	Header http.Header
	Body   []byte
}

// receiver is a real HTTP server that answers with respond and keeps every request it got.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []seen
}

func newReceiver(t *testing.T, respond http.HandlerFunc) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, seen{Header: r.Header.Clone(), Body: body})
		rc.mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]seen(nil), rc.got...)
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func newHandler(t *testing.T, url string, tune func(*webhook.Config)) *webhook.Handler[handlers.Row] {
	t.Helper()
	cfg := webhook.Config{URL: url, Secret: secret}
	if tune != nil {
		tune(&cfg)
	}
	h, err := webhook.New[handlers.Row](cfg)
	require.NoError(t, err)
	return h
}

// record is a booking record as the processor would deliver it.
func record(id string, attempt int) *handlers.Record[handlers.Row] {
	n, _ := strconv.ParseInt(id, 10, 64)
	return &handlers.Record[handlers.Row]{
		Process:   "booking_webhook",
		ID:        id,
		CreatedAt: time.Date(2024, 5, 1, 10, 0, 0, 123456000, time.UTC),
		Key:       "agg-7",
		Attempt:   attempt,
		Value: handlers.Row{
			Columns: []string{"id", "aggregate_id", "amount", "payload"},
			Values:  []any{n, "agg-7", int32(100), json.RawMessage(`{"seats":2}`)},
		},
	}
}

func TestRequestBodyAndHeaders(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusNoContent, ""))
	h := newHandler(t, rc.srv.URL+"/hooks", func(c *webhook.Config) {
		c.Headers = http.Header{
			"X-Api-Token":     {"token-1"},
			"Idempotency-Key": {"spoofed"}, // the handler's own headers win
		}
	})
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, record("42", 1)))

	rec := record("43", 3)
	rec.Key = ""
	rec.CreatedAt = time.Date(2024, 5, 1, 12, 0, 0, 5000, time.FixedZone("CEST", 2*3600))
	require.NoError(t, h.Handle(ctx, rec))

	got := rc.requests()
	require.Len(t, got, 2)
	require.Equal(t, `{"process":"booking_webhook","id":"42","created_at":"2024-05-01T10:00:00.123456Z","key":"agg-7",`+
		`"attempt":1,"record":{"id":42,"aggregate_id":"agg-7","amount":100,"payload":{"seats":2}}}`, string(got[0].Body))
	require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))
	require.Equal(t, "booking_webhook:42", got[0].Header.Get(webhook.IdempotencyKeyHeader))
	require.Equal(t, []string{"booking_webhook:42"}, got[0].Header.Values(webhook.IdempotencyKeyHeader))
	require.Equal(t, "1", got[0].Header.Get(webhook.AttemptHeader))
	require.Equal(t, "token-1", got[0].Header.Get("X-Api-Token"))
	require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}$`, got[0].Header.Get(webhook.SignatureHeader))

	// No key: the field is left out. The time is given in UTC.
	require.Equal(t, `{"process":"booking_webhook","id":"43","created_at":"2024-05-01T10:00:00.000005Z",`+
		`"attempt":3,"record":{"id":43,"aggregate_id":"agg-7","amount":100,"payload":{"seats":2}}}`, string(got[1].Body))
	require.Equal(t, "3", got[1].Header.Get(webhook.AttemptHeader))
}

func TestSignatureVerifies(t *testing.T) {
	t.Parallel()
	type verdict struct {
		err    error
		header string
		body   []byte
		id     string
	}
	verdicts := make(chan verdict, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := verdict{header: r.Header.Get(webhook.SignatureHeader)}
		v.err = webhook.VerifyRequest(secret, r, time.Minute)
		// VerifyRequest put the body back: it can be read again.
		v.body, _ = io.ReadAll(r.Body)
		var b struct{ ID string }
		if err := json.Unmarshal(v.body, &b); err != nil {
			v.err = errors.Join(v.err, err)
		}
		v.id = b.ID
		verdicts <- v
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	h := newHandler(t, srv.URL, nil)
	before := time.Now()
	require.NoError(t, h.Handle(context.Background(), record("42", 1)))
	v := <-verdicts
	require.NoError(t, v.err)
	require.Equal(t, "42", v.id)

	header, body := v.header, v.body
	require.NoError(t, webhook.Verify(secret, header, body, time.Minute, time.Now()))

	ts, err := strconv.ParseInt(strings.TrimPrefix(strings.Split(header, ",")[0], "t="), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, before.Unix(), ts, 2)
	require.Equal(t, webhook.Sign(secret, time.Unix(ts, 0), body), header, "Sign is what the handler sends")
	signed := time.Unix(ts, 0)

	tampered := []byte(strings.Replace(string(body), `"amount":100`, `"amount":900`, 1))
	require.NotEqual(t, body, tampered)
	require.ErrorIs(t, webhook.Verify(secret, header, tampered, time.Minute, signed), webhook.ErrBadSignature)
	require.ErrorIs(t, webhook.Verify([]byte("another-secret"), header, body, time.Minute, signed), webhook.ErrBadSignature)
	require.ErrorIs(t, webhook.Verify(nil, header, body, time.Minute, signed), webhook.ErrBadSignature)

	// A genuine but old request is a possible replay; so is one from too far in the future.
	err = webhook.Verify(secret, header, body, 5*time.Minute, signed.Add(6*time.Minute))
	require.ErrorIs(t, err, webhook.ErrSignatureExpired)
	require.NotErrorIs(t, err, webhook.ErrBadSignature)
	require.ErrorIs(t, webhook.Verify(secret, header, body, 5*time.Minute, signed.Add(-6*time.Minute)), webhook.ErrSignatureExpired)
	require.NoError(t, webhook.Verify(secret, header, body, 5*time.Minute, signed.Add(4*time.Minute)))
	// No tolerance means the default one.
	require.NoError(t, webhook.Verify(secret, header, body, 0, signed.Add(5*time.Minute-time.Second)))
	require.ErrorIs(t, webhook.Verify(secret, header, body, 0, signed.Add(5*time.Minute+time.Second)), webhook.ErrSignatureExpired)

	// The timestamp is inside the MAC: moving it forward breaks the signature.
	forged := strings.Replace(header, "t="+strconv.FormatInt(ts, 10), "t="+strconv.FormatInt(ts+3600, 10), 1)
	require.ErrorIs(t, webhook.Verify(secret, forged, body, time.Minute, signed.Add(time.Hour)), webhook.ErrBadSignature)

	// Errors never show the secret.
	for _, e := range []error{
		webhook.Verify([]byte("another-secret"), header, body, time.Minute, signed),
		webhook.Verify(secret, header, body, time.Minute, signed.Add(time.Hour)),
	} {
		require.NotContains(t, e.Error(), string(secret))
	}
}

func TestVerifyHeaderForms(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"1"}`)
	at := time.Unix(1700000000, 0)
	good := webhook.Sign(secret, at, body)
	v1 := strings.Split(good, ",v1=")[1]
	other := strings.Split(webhook.Sign([]byte("old-secret"), at, body), ",v1=")[1]

	for _, h := range []string{
		good,
		" t=1700000000 , v1=" + v1 + " ",
		"v1=" + v1 + ",t=1700000000",
		"t=1700000000,v1=" + other + ",v1=" + v1, // signed with an old and a new secret during rotation
		"t=1700000000,v0=whatever,v1=" + v1,      // unknown entries are ignored
	} {
		require.NoError(t, webhook.Verify(secret, h, body, time.Minute, at), "header %q", h)
	}
	require.ErrorIs(t, webhook.Verify(secret, "t=1700000000,v1="+other, body, time.Minute, at), webhook.ErrBadSignature)

	for _, h := range []string{
		"",
		"garbage",
		"t=1700000000",
		"v1=" + v1,
		"t=,v1=" + v1,
		"t=soon,v1=" + v1,
		"t=+1700000000,v1=" + v1,
		"t=1700000000,t=1700000000,v1=" + v1,
		"t=1700000000,v1=" + v1[:10],
		"t=1700000000,v1=" + strings.Repeat("z", 64),
		"t=1700000000;v1=" + v1,
	} {
		err := webhook.Verify(secret, h, body, time.Minute, at)
		require.ErrorIs(t, err, webhook.ErrMalformedSignature, "header %q", h)
	}
}

func TestIdempotencyKeyIsStableAcrossAttempts(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK, ""))
	h := newHandler(t, rc.srv.URL, nil)
	require.NoError(t, h.Handle(context.Background(), record("7", 1)))
	require.NoError(t, h.Handle(context.Background(), record("7", 2)))
	require.NoError(t, h.Handle(context.Background(), record("8", 1)))

	got := rc.requests()
	require.Len(t, got, 3)
	require.Equal(t, "booking_webhook:7", got[0].Header.Get(webhook.IdempotencyKeyHeader))
	require.Equal(t, got[0].Header.Get(webhook.IdempotencyKeyHeader), got[1].Header.Get(webhook.IdempotencyKeyHeader))
	require.Equal(t, "booking_webhook:8", got[2].Header.Get(webhook.IdempotencyKeyHeader))
	require.Equal(t, "1", got[0].Header.Get(webhook.AttemptHeader))
	require.Equal(t, "2", got[1].Header.Get(webhook.AttemptHeader))
}

func TestRetryableStatuses(t *testing.T) {
	t.Parallel()
	for _, code := range []int{500, 502, 503, 504, 408, 429} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, status(code, "try later\n"))
			h := newHandler(t, rc.srv.URL+"/hooks", nil)
			err := h.Handle(context.Background(), record("1", 1))
			require.Error(t, err)
			require.False(t, handlers.IsPermanent(err), "%d must be retried: %v", code, err)
			_, ok := handlers.RetryAfterOf(err)
			require.False(t, ok)
			require.Equal(t, "webhook POST "+rc.srv.URL+"/hooks: "+strconv.Itoa(code)+" "+http.StatusText(code)+": try later",
				err.Error())
			var se *webhook.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, code, se.StatusCode)
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	respond := func(code int, retryAfter string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(code)
		}
	}
	ctx := context.Background()

	rc := newReceiver(t, respond(http.StatusTooManyRequests, "3"))
	err := newHandler(t, rc.srv.URL, nil).Handle(ctx, record("1", 1))
	require.Error(t, err)
	require.False(t, handlers.IsPermanent(err))
	after, ok := handlers.RetryAfterOf(err)
	require.True(t, ok)
	require.Equal(t, 3*time.Second, after)
	require.Contains(t, err.Error(), "429 Too Many Requests")

	rc = newReceiver(t, respond(http.StatusServiceUnavailable, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)))
	err = newHandler(t, rc.srv.URL, nil).Handle(ctx, record("1", 1))
	after, ok = handlers.RetryAfterOf(err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), after.Seconds(), 5)
	require.False(t, handlers.IsPermanent(err))

	for _, v := range []string{"0", "soon", "-5", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)} {
		rc = newReceiver(t, respond(http.StatusTooManyRequests, v))
		err = newHandler(t, rc.srv.URL, nil).Handle(ctx, record("1", 1))
		require.Error(t, err)
		_, ok = handlers.RetryAfterOf(err)
		require.False(t, ok, "Retry-After %q", v)
	}
}

func TestClientErrorsArePermanent(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusBadRequest, `{"error":"unknown customer"}`))
	h := newHandler(t, rc.srv.URL+"/hooks", nil)
	err := h.Handle(context.Background(), record("1", 1))
	require.Error(t, err)
	require.True(t, handlers.IsPermanent(err), "400 must halt as a poison record: %v", err)
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 400, se.StatusCode)
	require.Equal(t, `{"error":"unknown customer"}`, se.Body)
	require.Equal(t, `webhook POST `+rc.srv.URL+`/hooks: 400 Bad Request: {"error":"unknown customer"}`, se.Error())
	require.Contains(t, err.Error(), "400")

	for _, code := range []int{409, 413, 415, 422} {
		rc := newReceiver(t, status(code, ""))
		err := newHandler(t, rc.srv.URL, nil).Handle(context.Background(), record("1", 1))
		require.True(t, handlers.IsPermanent(err), "%d: %v", code, err)
		_, sinks := handlers.UnavailableOf(err)
		require.False(t, sinks, "%d is the record's refusal", code)
		require.Contains(t, err.Error(), strconv.Itoa(code))
	}
}

// TestRefusalsEveryRecordMeetsAreTheSinks: a status that names the endpoint, the credentials or the
// sink's health is the sink's outage, with what to check, unless Config.RecordStatuses says that this
// API means the record by it; 408 and 500 may pass and are the record's to retry.
func TestRefusalsEveryRecordMeetsAreTheSinks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code  int
		check string
	}{
		{401, "the credentials"}, {403, "the credentials' permissions"}, {404, "the URL"}, {405, "the URL"},
		{407, "the proxy's credentials"}, {410, "the URL"}, {421, "the URL"}, {429, "rate limit"},
		{502, "the receiver's health"}, {503, "the receiver's health"}, {504, "the receiver's health"},
	} {
		rc := newReceiver(t, status(tt.code, ""))
		err := newHandler(t, rc.srv.URL+"/hooks", nil).Handle(context.Background(), record("1", 1))
		u, ok := handlers.UnavailableOf(err)
		require.True(t, ok, "%d is the sink's: %v", tt.code, err)
		require.Contains(t, u.Check, tt.check, "%d", tt.code)
		require.False(t, handlers.IsPermanent(err), "%d", tt.code)
		require.Contains(t, err.Error(), strconv.Itoa(tt.code))
	}
	for _, code := range []int{408, 500} {
		rc := newReceiver(t, status(code, ""))
		err := newHandler(t, rc.srv.URL, nil).Handle(context.Background(), record("1", 1))
		_, ok := handlers.UnavailableOf(err)
		require.False(t, ok, "%d may be the record's: %v", code, err)
		require.False(t, handlers.IsPermanent(err), "%d is retried", code)
	}
	// An API whose 404 means the record's customer does not exist says so.
	rc := newReceiver(t, status(http.StatusNotFound, `{"error":"no such customer"}`))
	err := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.RecordStatuses = []int{404} }).Handle(context.Background(), record("1", 1))
	_, ok := handlers.UnavailableOf(err)
	require.False(t, ok, "%v", err)
	require.True(t, handlers.IsPermanent(err), "%v", err)
	_, err = webhook.New[handlers.Row](webhook.Config{URL: rc.srv.URL, Secret: secret, RecordStatuses: []int{200}})
	require.ErrorContains(t, err, "Config.RecordStatuses holds 200")
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, status(http.StatusOK, ""))
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+"/moved?token=abc", http.StatusPermanentRedirect)
	})
	err := newHandler(t, rc.srv.URL, nil).Handle(context.Background(), record("1", 1))
	u, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "a redirect of every request is the sink's: %v", err)
	require.Contains(t, u.Check, "redirects every request to "+target.srv.URL+"/moved")
	require.NotContains(t, u.Check, "token=abc")
	require.Contains(t, err.Error(), "308 Permanent Redirect to "+target.srv.URL+"/moved")
	require.NotContains(t, err.Error(), "token=abc")
	require.Empty(t, target.requests(), "the redirect was followed")
}

func TestLongErrorBodyIsCut(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusUnprocessableEntity, "line one\nline two\r\n"+strings.Repeat("x", 5000)))
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.MaxErrorBody = 100 })
	err := h.Handle(context.Background(), record("1", 1))
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "line one line two  "+strings.Repeat("x", 100-len("line one\nline two\r\n"))+"...", se.Body)
	require.NotContains(t, err.Error(), "\n")
	require.Less(t, len(err.Error()), 250)

	// The default bound is 512 bytes.
	rc = newReceiver(t, status(http.StatusInternalServerError, strings.Repeat("é", 1000)))
	err = newHandler(t, rc.srv.URL, nil).Handle(context.Background(), record("1", 1))
	require.ErrorAs(t, err, &se)
	require.Equal(t, strings.Repeat("é", 256)+"...", se.Body)
}

func TestEndlessErrorBodyIsNotReadToTheEnd(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(strings.Repeat("y", 4096))
		for r.Context().Err() == nil { // until the client hangs up
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	h := newHandler(t, rc.srv.URL, func(c *webhook.Config) { c.Timeout = 5 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.Handle(ctx, record("1", 1))
	require.NoError(t, ctx.Err(), "the handler kept reading the response body")
	require.True(t, handlers.IsPermanent(err), "%v", err)
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, strings.Repeat("y", 512)+"...", se.Body)
}

func TestTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the client gave up
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	h := newHandler(t, rc.srv.URL+"/slow", func(c *webhook.Config) { c.Timeout = 100 * time.Millisecond })
	// The outer deadline only keeps a handler that ignores Config.Timeout from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.Handle(ctx, record("1", 1))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Config.Timeout did not cut the request off")
	require.False(t, handlers.IsPermanent(err), "a timeout must be retried: %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "webhook POST "+rc.srv.URL+"/slow: no response within 100ms")
	require.Len(t, rc.requests(), 1)
}

func TestNetworkErrorIsRetryable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := newHandler(t, url, nil).Handle(context.Background(), record("1", 1))
	require.Error(t, err)
	require.False(t, handlers.IsPermanent(err), "a refused connection must be retried: %v", err)
	require.Contains(t, err.Error(), "webhook POST "+url+": ")
}

func TestErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	users := make(chan string, 1)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		users <- user + ":" + pass
		w.WriteHeader(http.StatusForbidden)
	})
	withCreds := strings.Replace(rc.srv.URL, "://", "://hook:hunter2@", 1) + "/in?token=s3cret"
	h := newHandler(t, withCreds, nil)
	err := h.Handle(context.Background(), record("1", 1))
	require.Equal(t, "hook:hunter2", <-users, "userinfo is sent as basic authentication")
	_, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "a 403 is the credentials', every record's: %v", err)
	require.Equal(t, "webhook POST "+rc.srv.URL+"/in: 403 Forbidden", err.Error())

	srv := httptest.NewServer(http.NotFoundHandler())
	closed := strings.Replace(srv.URL, "://", "://hook:hunter2@", 1) + "/in?token=s3cret"
	srv.Close()
	err = newHandler(t, closed, nil).Handle(context.Background(), record("1", 1))
	require.Error(t, err)
	for _, leak := range []string{"hunter2", "s3cret", string(secret)} {
		require.NotContains(t, err.Error(), leak)
	}
}

func TestUnencodableRecordIsPermanent(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK, ""))
	h := newHandler(t, rc.srv.URL, nil)
	rec := record("5", 1)
	rec.Value.Values[2] = func() {}
	err := h.Handle(context.Background(), rec)
	require.True(t, handlers.IsPermanent(err), "%v", err)
	require.Contains(t, err.Error(), `record 5`)
	require.Contains(t, err.Error(), `"amount"`)
	require.Empty(t, rc.requests())
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  webhook.Config
		want string
	}{
		{webhook.Config{Secret: secret}, "webhook: Config.URL is required"},
		{webhook.Config{URL: "ftp://example.com/x", Secret: secret}, `Config.URL must be an http or https URL, not "ftp"`},
		{webhook.Config{URL: "/relative", Secret: secret}, `Config.URL must be an http or https URL, not ""`},
		{webhook.Config{URL: "http://u:hunter2@/path", Secret: secret}, "Config.URL http:///path has no host"},
		{webhook.Config{URL: "http://u:hunter2@example.com:port/", Secret: secret}, "Config.URL is not a valid URL"},
		{webhook.Config{URL: "https://example.com/hooks"}, "Config.Secret is required"},
		{webhook.Config{URL: "https://example.com/hooks", Secret: secret, Timeout: -time.Second}, "Config.Timeout -1s is negative"},
		{webhook.Config{URL: "https://example.com/hooks", Secret: secret, MaxErrorBody: -1}, "Config.MaxErrorBody -1 is negative"},
	} {
		_, err := webhook.New[handlers.Row](tc.cfg)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "hunter2")
		require.NotContains(t, err.Error(), "\n")
	}
	_, err := webhook.New[map[string]any](webhook.Config{URL: "https://example.com/hooks", Secret: secret})
	require.NoError(t, err)
}

// End to end: the real processor on a real database, delivering to a real HTTP receiver.

const bookingsDDL = `
	CREATE TABLE bookings (
		id           bigserial PRIMARY KEY,
		aggregate_id text NOT NULL,
		amount       int NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON bookings (created_at, id);`

// delivery is one request the sink got, as it decoded it.
type delivery struct {
	IdempotencyKey string
	ID             string
	Key            string
	Attempt        int
	Record         map[string]any
	Status         int // what the sink answered; 0 while it is still answering, -1 when the client gave up
}

// sink is a receiver that verifies signatures the way a real one would and lets the test decide each
// answer.
type sink struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	answer func(r *http.Request, d delivery, earlier int) int // earlier: requests already seen for d.ID
}

func newSink(t *testing.T, answer func(r *http.Request, d delivery, earlier int) int) *sink {
	s := &sink{t: t, answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	if err := webhook.VerifyRequest(secret, r, time.Minute); err != nil {
		s.t.Errorf("sink: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var body struct {
		ID      string         `json:"id"`
		Key     string         `json:"key"`
		Attempt int            `json:"attempt"`
		Record  map[string]any `json:"record"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.t.Errorf("sink: decode body: %v", err)
		w.WriteHeader(http.StatusUnsupportedMediaType)
		return
	}
	d := delivery{IdempotencyKey: r.Header.Get(webhook.IdempotencyKeyHeader), ID: body.ID, Key: body.Key,
		Attempt: body.Attempt, Record: body.Record}
	s.mu.Lock()
	earlier := 0
	for _, g := range s.got {
		if g.ID == d.ID {
			earlier++
		}
	}
	i := len(s.got)
	s.got = append(s.got, d)
	s.mu.Unlock()

	code := s.answer(r, d, earlier)
	s.mu.Lock()
	s.got[i].Status = code
	s.mu.Unlock()
	if code > 0 {
		w.WriteHeader(code)
		if code == http.StatusBadRequest {
			_, _ = io.WriteString(w, `{"error":"unknown customer"}`)
		}
	}
}

func (s *sink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.got...)
}

// delivered returns the ids the sink accepted, in order.
func (s *sink) delivered() []string {
	var ids []string
	for _, d := range s.deliveries() {
		if d.Status >= 200 && d.Status < 300 {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

type e2e struct {
	db      *pgtest.DB
	process string
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, bookingsDDL)
	pgtest.AddClock(t, db, "bookings")
	return &e2e{db: db, process: "booking_webhook"}
}

// insert adds one booking per amount, each in its own statement, and returns their ids in order.
func (e *e2e) insert(t *testing.T, amounts ...int) []string {
	t.Helper()
	var ids []string
	for _, a := range amounts {
		var id int64
		require.NoError(t, e.db.Pool.QueryRow(context.Background(),
			"INSERT INTO bookings (aggregate_id, amount) VALUES ($1, $2) RETURNING id", "agg-"+strconv.Itoa(a%2), a).Scan(&id))
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	return ids
}

// run starts the processor delivering to h and returns a function that stops it and requires a clean
// stop.
func (e *e2e) run(t *testing.T, h handlers.Handler[handlers.Row]) (stop func()) {
	t.Helper()
	cc, err := pgx.ParseConfig(e.db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      e.process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "bookings"},
		Handler:      h,
		PollInterval: 20 * time.Millisecond,
		RetryMin:     20 * time.Millisecond,
		RetryMax:     200 * time.Millisecond,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	require.NoError(t, err)
	stopRun := testrun.Start(t, p.Run)
	return func() { require.NoError(t, stopRun(), "Run after a clean stop") }
}

// halt is the halt state and position of the cursor row.
type halt struct {
	PositionID string
	RecordID   string
	Error      string
	Attempts   int
}

// cursor reads the cursor row; it fails the test when there is none.
func (e *e2e) cursor(t *testing.T) halt {
	t.Helper()
	h, err := e.readCursor()
	require.NoError(t, err)
	return h
}

// readCursor reads the cursor row, which does not exist until the processor first ran.
func (e *e2e) readCursor() (halt, error) {
	var pos, rec, msg *string
	var h halt
	err := e.db.Pool.QueryRow(context.Background(), `
		SELECT position_id, halted_record_id, halted_error, halted_attempts
		FROM inorder.cursor WHERE process_name = $1`, e.process).Scan(&pos, &rec, &msg, &h.Attempts)
	for _, p := range []struct {
		from *string
		to   *string
	}{{pos, &h.PositionID}, {rec, &h.RecordID}, {msg, &h.Error}} {
		if p.from != nil {
			*p.to = *p.from
		}
	}
	return h, err
}

// eventually is the tests' one wait: 20s, every 5ms.
var eventually = testrun.Eventually

func TestProcessorRetriesServerErrorThenDelivers(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ids := e.insert(t, 10, 20, 30)
	s := newSink(t, func(_ *http.Request, d delivery, earlier int) int {
		if d.ID == ids[1] && earlier == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	h := newHandler(t, s.srv.URL, nil)
	stop := e.run(t, h)
	eventually(t, "all three delivered", func() bool { return len(s.delivered()) == 3 })
	stop()

	require.Equal(t, ids, s.delivered(), "delivered in order")
	got := s.deliveries()
	require.Len(t, got, 4)
	type step struct {
		ID      string
		Attempt int
		Status  int
	}
	var steps []step
	for _, d := range got {
		steps = append(steps, step{d.ID, d.Attempt, d.Status})
		require.Equal(t, e.process+":"+d.ID, d.IdempotencyKey)
	}
	require.Equal(t, []step{{ids[0], 1, 200}, {ids[1], 1, 500}, {ids[1], 2, 200}, {ids[2], 1, 200}}, steps)
	require.Equal(t, got[1].IdempotencyKey, got[2].IdempotencyKey, "a retry carries the same idempotency key")
	require.Equal(t, "agg-0", got[0].Key)
	require.Equal(t, float64(20), got[1].Record["amount"])
	require.Equal(t, ids[1], strconv.FormatFloat(got[1].Record["id"].(float64), 'f', -1, 64))

	c := e.cursor(t)
	require.Equal(t, halt{PositionID: ids[2]}, c, "past every record, halt cleared")
}

func TestProcessorHaltsOnClientError(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ids := e.insert(t, 10, 20, 30)
	s := newSink(t, func(_ *http.Request, d delivery, _ int) int {
		if d.ID == ids[1] {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	stop := e.run(t, newHandler(t, s.srv.URL+"/hooks", nil))
	// Two failed attempts show the stream stays halted on the record across retries.
	eventually(t, "the stream halted on the second record twice", func() bool {
		c, err := e.readCursor()
		return err == nil && c.RecordID == ids[1] && c.Attempts >= 2
	})
	stop()

	c := e.cursor(t)
	require.Equal(t, ids[0], c.PositionID, "the position does not pass the rejected record")
	require.Equal(t, ids[1], c.RecordID)
	require.Contains(t, c.Error, "400")
	require.Contains(t, c.Error, `webhook POST `+s.srv.URL+`/hooks: 400 Bad Request: {"error":"unknown customer"}`)
	require.Equal(t, []string{ids[0]}, s.delivered())
	for _, d := range s.deliveries() {
		require.NotEqual(t, ids[2], d.ID, "a record after the halted one was sent")
	}
}

func TestProcessorRetriesTimeout(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ids := e.insert(t, 10, 20)
	haltedErr := make(chan string, 1)
	s := newSink(t, func(r *http.Request, d delivery, earlier int) int {
		if d.ID != ids[0] {
			return http.StatusOK
		}
		if earlier == 0 {
			<-r.Context().Done() // hold the first request until the client gives up on it
			return -1
		}
		// The retry: the failed attempt is on record in the cursor row.
		var msg *string
		err := e.db.Pool.QueryRow(r.Context(),
			"SELECT halted_error FROM inorder.cursor WHERE process_name = $1", e.process).Scan(&msg)
		if err == nil && msg != nil {
			haltedErr <- *msg
		} else {
			haltedErr <- "no halt state"
		}
		return http.StatusOK
	})
	stop := e.run(t, newHandler(t, s.srv.URL, func(c *webhook.Config) { c.Timeout = 150 * time.Millisecond }))
	eventually(t, "both records delivered", func() bool { return len(s.delivered()) == 2 })
	stop()

	require.Equal(t, ids, s.delivered())
	got := s.deliveries()
	require.Len(t, got, 3)
	require.Equal(t, []int{-1, 200, 200}, []int{got[0].Status, got[1].Status, got[2].Status})
	require.Equal(t, []string{ids[0], ids[0], ids[1]}, []string{got[0].ID, got[1].ID, got[2].ID})
	require.Equal(t, []int{1, 2, 1}, []int{got[0].Attempt, got[1].Attempt, got[2].Attempt})
	require.Equal(t, got[0].IdempotencyKey, got[1].IdempotencyKey)
	require.Contains(t, <-haltedErr, "no response within 150ms")
	require.Equal(t, halt{PositionID: ids[1]}, e.cursor(t))
}
