package webhook

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/tracecontext"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	defaultTimeout      = 10 * time.Second
	defaultMaxErrorBody = 512
	// drainLimit bounds how much of a response body is read and thrown away so that the connection can be
	// reused; a longer body costs a new connection instead.
	drainLimit = 64 << 10
	userAgent  = "inorder-webhook"
)

// Config configures a Handler. URL is required, and so is Secret unless Signature is SignatureNone; every
// other field has a documented default.
type Config struct {
	// URL is where records are POSTed: an absolute http or https URL. Userinfo in it is sent as basic
	// authentication. Error messages show the URL without userinfo and query. Required.
	URL string
	// Secret is the HMAC-SHA256 key every request is signed with; receivers verify with the same key. With
	// SignatureStandardWebhooks a secret in the specification's form, whsec_ followed by the key in
	// base64, is decoded as its libraries decode it; any other secret is the key itself. It never appears
	// in logs or error messages. Required, except with SignatureNone, which refuses it.
	Secret []byte
	// Signature is the scheme requests are signed with: SignatureInorder (the Inorder-Signature header,
	// verifiable with stripe-go), SignatureStandardWebhooks (the webhook-id, webhook-timestamp and
	// webhook-signature headers) or SignatureNone. Empty means SignatureInorder.
	Signature SignatureScheme
	// Timeout bounds how long one request may go with nothing moving: from its start (connecting, TLS)
	// to the first bytes of its body taken by the connection, between pieces of the body, from the last
	// of them to the response (an interim 1xx response counts), and between pieces of the response's
	// error excerpt. A body of megabytes on a slow link goes on for as long as its bytes keep going out;
	// a receiver that stops reading, or never answers, is given up on once Timeout has passed since the
	// last byte moved ("no response within"). Every byte that moves is reported to the processor too
	// (handlers.Progress), whose handler timeout then counts a silence as well. Keep it below the
	// processor's HandlerTimeout. Zero means 10s.
	Timeout time.Duration
	// Client sends the requests. Nil means a client on http.DefaultTransport that does not follow
	// redirects and has no overall timeout of its own: Timeout applies to each request through its context.
	// A client given here keeps its own redirect policy and timeout (http.Client.Timeout bounds the whole
	// request, however its bytes move).
	Client *http.Client
	// MaxErrorBody bounds, in bytes, the excerpt of a failed response's body kept in the error (and so in
	// the cursor row and the logs). Zero means 512.
	MaxErrorBody int
	// Headers are static headers sent with every request, for example the Authorization bearer token of a
	// third-party API. The handler's own Content-Type, idempotency, attempt and signature headers are set
	// after them and win. Values are credentials as far as errors go: where a response body is quoted in
	// an error, each value, and each word of a value, of 8 characters or more is replaced by [redacted], as
	// is the secret. Names must be HTTP tokens and values must hold no line break or other control
	// character but a tab. Nil means none.
	Headers http.Header
	// IdempotencyHeader names the header that carries the idempotency key, <process>:<record id>, the
	// same on every delivery of a record: for an API that expects it under a name of its own. Empty means
	// IdempotencyKeyHeader, "Idempotency-Key".
	IdempotencyHeader string
	// BodyColumn, when set, makes the request body the value of this column of the record, as it is,
	// instead of the envelope: the JSON a third-party API expects, written into the source row by the
	// application (the payload column of an outbox). The column must be json or jsonb, or text or bytea
	// holding JSON. A record whose column is missing, NULL or not valid JSON halts the stream with a
	// permanent error naming the record and the column, and nothing is sent. It needs records of type
	// handlers.Row. Empty means the envelope.
	BodyColumn string
	// MaxRate bounds the requests sent per second, shared by every request in flight (a keyed window),
	// spaced evenly: for an API that caps requests (payment APIs commonly allow around 100 a second).
	// Zero means no bound. Whatever it is, a Retry-After on a 429 or 503 response holds every request to
	// the sink for that long, not only the refused one.
	MaxRate float64
	// RecordStatuses are the statuses that mean the record's own refusal for this API, although by default
	// they are the sink's (see Handle): a 404 of an API whose 404 says that the record's customer does not
	// exist, say. A status listed here refuses the record (a permanent failure: the stream halts, or parks
	// the key) instead of waiting for the sink. Nil means none.
	RecordStatuses []int
	// Envelope, when set, sends each record as a CloudEvent, in the envelope's content mode as the
	// CloudEvents HTTP binding says: the record (or BodyColumn's JSON) as the data, its type from the
	// record's type column (or event_type), and ce- headers in binary mode. Nil means the handler's own
	// envelope.
	Envelope *cloudevent.Envelope
}

// Handler POSTs each record to a URL, signed as Config.Signature says, and returns once the receiver
// answered. It implements handlers.Handler and is safe for concurrent use.
type Handler[T any] struct {
	url          string // as configured, for the requests
	target       string // without userinfo and query, for messages
	secret       []byte // the HMAC key
	scheme       SignatureScheme
	timeout      time.Duration
	client       *http.Client
	maxErrorBody int
	headers      http.Header
	idempotency  string // the idempotency key's header
	bodyColumn   string
	redactor     redactor
	spanAttrs    []attribute.KeyValue
	gate         *gate
	recordStatus map[int]bool
	envelope     *cloudevent.Envelope
}

var _ handlers.Handler[handlers.Row] = (*Handler[handlers.Row])(nil)

// New checks cfg and returns a handler. It makes no request.
func New[T any](cfg Config) (*Handler[T], error) {
	u, err := checkURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	key, err := checkSignature(cfg)
	if err != nil {
		return nil, err
	}
	idempotency, err := checkHeaders(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.BodyColumn != "" {
		if _, ok := any(*new(T)).(handlers.Row); !ok {
			return nil, fmt.Errorf("webhook: Config.BodyColumn needs a Handler[handlers.Row], not a Handler[%s]",
				reflect.TypeFor[T]())
		}
	}
	recordStatus, err := checkLimits(cfg)
	if err != nil {
		return nil, err
	}
	target := redact(u)
	h := &Handler[T]{
		gate:         newGate(cfg.MaxRate),
		recordStatus: recordStatus,
		url:          cfg.URL,
		target:       target,
		spanAttrs:    spanAttrs(u, target),
		secret:       bytes.Clone(key),
		scheme:       cmp.Or(cfg.Signature, SignatureInorder),
		timeout:      cmp.Or(cfg.Timeout, defaultTimeout),
		client:       cfg.Client,
		maxErrorBody: cmp.Or(cfg.MaxErrorBody, defaultMaxErrorBody),
		headers:      cfg.Headers.Clone(),
		idempotency:  idempotency,
		bodyColumn:   cfg.BodyColumn,
		redactor:     newRedactor(cfg.Secret, cfg.Headers),
		envelope:     cfg.Envelope,
	}
	if h.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// A keyed window keeps many requests to one host in flight: keep their connections for the next
		// ones rather than the default two.
		tr.MaxIdleConnsPerHost = 256
		// Dialled as http.DefaultTransport dials, with a small queue of bytes not sent yet, so that a
		// body's progress is the network's (see notSentLowat).
		tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: notSentLowat}).DialContext
		h.client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return h, nil
}

// checkURL parses Config.URL, which must be an http or https URL with a host.
func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("webhook: Config.URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the wrapper repeats the URL, which may hold a password
		}
		return nil, fmt.Errorf("webhook: Config.URL is not a valid URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook: Config.URL must be an http or https URL, not %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("webhook: Config.URL %s has no host", redact(u))
	}
	return u, nil
}

// checkSignature checks Config.Signature against Config.Secret and returns the key requests are signed
// with (nil for none).
func checkSignature(cfg Config) ([]byte, error) {
	switch cfg.Signature {
	case "", SignatureInorder, SignatureStandardWebhooks:
		if len(cfg.Secret) == 0 {
			return nil, errors.New("webhook: Config.Secret is required: it is the HMAC key receivers verify requests with")
		}
		if cfg.Signature == SignatureStandardWebhooks {
			return standardKey(cfg.Secret)
		}
		return cfg.Secret, nil
	case SignatureNone:
		if len(cfg.Secret) != 0 {
			return nil, errors.New("webhook: Config.Secret is set but Config.Signature is none: nothing would be signed with it")
		}
		return nil, nil
	}
	return nil, fmt.Errorf("webhook: Config.Signature %q is none of %s, %s and %s",
		cfg.Signature, SignatureInorder, SignatureStandardWebhooks, SignatureNone)
}

// checkHeaders checks Config.IdempotencyHeader and Config.Headers, and returns the idempotency key's
// header.
func checkHeaders(cfg Config) (string, error) {
	idempotency := IdempotencyKeyHeader
	if cfg.IdempotencyHeader != "" {
		if !validHeaderName(cfg.IdempotencyHeader) {
			return "", fmt.Errorf("webhook: Config.IdempotencyHeader %q is not an HTTP header name", cfg.IdempotencyHeader)
		}
		idempotency = http.CanonicalHeaderKey(cfg.IdempotencyHeader)
		own := []string{"Content-Type", AttemptHeader, SignatureHeader, standardIDHeader, standardTimestampHeader,
			standardSignatureHeader}
		for _, o := range own {
			if idempotency == http.CanonicalHeaderKey(o) {
				return "", fmt.Errorf("webhook: Config.IdempotencyHeader %q is a header the handler sets for "+
					"another purpose", cfg.IdempotencyHeader)
			}
		}
	}
	for name, vs := range cfg.Headers {
		if !validHeaderName(name) {
			return "", fmt.Errorf("webhook: Config.Headers has %q, which is not an HTTP header name", name)
		}
		for _, v := range vs {
			if !validHeaderValue(v) { // the value is not shown: it may be a credential
				return "", fmt.Errorf("webhook: Config.Headers[%q] holds a line break or another control character", name)
			}
		}
	}
	return idempotency, nil
}

// checkLimits checks the numbers of cfg, and returns Config.RecordStatuses as a set.
func checkLimits(cfg Config) (map[int]bool, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("webhook: Config.Timeout %s is negative", cfg.Timeout)
	}
	if cfg.MaxErrorBody < 0 {
		return nil, fmt.Errorf("webhook: Config.MaxErrorBody %d is negative", cfg.MaxErrorBody)
	}
	if cfg.MaxRate < 0 {
		return nil, fmt.Errorf("webhook: Config.MaxRate %g is negative", cfg.MaxRate)
	}
	recordStatus := map[int]bool{}
	for _, code := range cfg.RecordStatuses {
		if code < 300 || code > 599 {
			return nil, fmt.Errorf("webhook: Config.RecordStatuses holds %d, which is no failing HTTP status (300 to 599)", code)
		}
		recordStatus[code] = true
	}
	return recordStatus, nil
}

// redact returns u without userinfo, query and fragment.
func redact(u *url.URL) string {
	r := *u
	r.User, r.RawQuery, r.ForceQuery, r.Fragment, r.RawFragment = nil, "", false, "", ""
	return r.String()
}

// Handle POSTs rec and classifies the outcome: nil for a 2xx status; a retryable error for 408, 429, 5xx,
// network errors and timeouts, carrying any Retry-After as handlers.RetryAfter; handlers.Permanent for
// other statuses, for a record that cannot be encoded as JSON, for a body column that holds no JSON, and
// for an idempotency key that cannot be sent in a header.
func (h *Handler[T]) Handle(ctx context.Context, rec *handlers.Record[T]) (err error) {
	body, err := h.body(rec)
	if err != nil {
		return err
	}
	key := rec.Process + ":" + rec.ID
	if !validHeaderValue(key) {
		return handlers.Permanent(fmt.Errorf("webhook: record %s: its idempotency key %q holds a control "+
			"character and cannot be sent in a header", rec.ID, key))
	}
	ctx, span := tracecontext.Start(ctx, tracerName, http.MethodPost, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(h.spanAttrs...)
		span.SetAttributes(attribute.Int("http.request.resend_count", max(0, rec.Attempt-1)))
	}
	var resp *http.Response
	defer func() { h.endSpan(span, resp, err) }()
	contentType, ceHeaders := "application/json", http.Header(nil)
	if h.envelope != nil {
		if body, contentType, ceHeaders, err = h.cloudEvent(ctx, rec, body); err != nil {
			return err
		}
	}
	rq, rctx, end := watch(ctx, h.timeout)
	defer end()
	req, err := h.request(rctx, rq, body)
	if err != nil {
		return fmt.Errorf("webhook POST %s: %w", h.target, unwrapURLError(err))
	}
	tracecontext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	h.setHeaders(req.Header, ceHeaders, contentType, key, rec.Attempt, body)

	if err := h.gate.wait(ctx, h.target); err != nil {
		if _, ok := handlers.UnavailableOf(err); ok {
			return err // not sent: the sink refused another request meanwhile
		}
		return fmt.Errorf("webhook POST %s: waiting for its turn (max rate, or the sink's Retry-After): %w", h.target, err)
	}
	resp, err = h.client.Do(req)
	if err != nil {
		err = unwrapURLError(err)
		if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("webhook POST %s: no response within %s: %w", h.target, h.timeout, err)
		}
		err = fmt.Errorf("webhook POST %s: %w", h.target, err)
		if ctx.Err() == nil {
			// No receiver judged the record: the name did not resolve, TLS failed, the connection was
			// refused or cut. Every record would meet it.
			err = handlers.Unavailable(err, "the URL's host and the way to it (DNS, TLS, a firewall): "+h.target)
			h.gate.stop(err)
		}
		return err
	}
	resp.Body = &receiving{ReadCloser: resp.Body, r: rq}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		_ = resp.Body.Close()
	}()
	err = h.classify(resp)
	_, retryAfter := handlers.RetryAfterOf(err)
	if _, out := handlers.UnavailableOf(err); (out || retryAfter) && !handlers.IsPermanent(err) {
		// The sink pauses: the requests waiting for their turn do not go (stop means stop).
		h.gate.stop(err)
	}
	return err
}

// request makes the POST of body in the request rq, whose context is ctx. A body of watchedBody or more
// goes out through a reader that records its progress; a smaller one as a *bytes.Reader, as before.
func (h *Handler[T]) request(ctx context.Context, rq *request, body []byte) (*http.Request, error) {
	if len(body) < watchedBody {
		return http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, nil)
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(body))
	req.Body = &sending{body: bytes.NewReader(body), r: rq}
	// For a request the transport sends again on a new connection (a kept-alive one the server had closed).
	req.GetBody = func() (io.ReadCloser, error) { return &sending{body: bytes.NewReader(body), r: rq}, nil }
	return req, nil
}

// setHeaders sets a request's headers: the configured ones, a CloudEvent's, the content type, the
// idempotency key, the attempt, and the signature of body.
func (h *Handler[T]) setHeaders(hdr, ceHeaders http.Header, contentType, key string, attempt int, body []byte) {
	hdr.Set("User-Agent", userAgent)
	for k, vs := range h.headers {
		hdr[k] = append([]string(nil), vs...)
	}
	for k, vs := range ceHeaders {
		hdr[k] = vs
	}
	hdr.Set("Content-Type", contentType)
	hdr.Set(h.idempotency, key)
	hdr.Set(AttemptHeader, strconv.Itoa(attempt))
	switch now := time.Now(); h.scheme {
	case SignatureInorder:
		hdr.Set(SignatureHeader, Sign(h.secret, now, body))
	case SignatureStandardWebhooks:
		ts, sig := signStandard(h.secret, key, now, body)
		hdr.Set(standardIDHeader, key)
		hdr.Set(standardTimestampHeader, ts)
		hdr.Set(standardSignatureHeader, sig)
	}
}

// tracerName is the instrumentation scope of the webhook's spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/webhook"

// spanAttrs are the attributes of every request's span, after OpenTelemetry's HTTP client conventions:
// the URL as messages show it (no userinfo, no query), never a header value.
func spanAttrs(u *url.URL, target string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("url.full", target),
		attribute.String("server.address", u.Hostname()),
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 && u.Scheme == "https" {
		port = 443
	} else if port == 0 {
		port = 80
	}
	return append(attrs, attribute.Int("server.port", port))
}

// endSpan ends a request's span with the response's status, and an error status for a failure.
func (h *Handler[T]) endSpan(span trace.Span, resp *http.Response, err error) {
	if resp != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	tracecontext.End(span, err)
}

// unwrapURLError drops the *url.Error around a client error: its text repeats the URL, userinfo and all.
func unwrapURLError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

func (h *Handler[T]) classify(resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	serr := &StatusError{URL: h.target, StatusCode: code, Body: excerpt(resp.Body, h.maxErrorBody, h.redactor)}
	if code >= 300 && code < 400 {
		if loc, err := resp.Location(); err == nil {
			serr.Location = redact(loc)
		}
	}
	var err error = serr
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok &&
		(code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
		h.gate.pause(d) // the sink's word holds for every request, not only this one
		err = handlers.RetryAfter(serr, d)
	} else if ok && (code == http.StatusRequestTimeout || code >= 500) {
		err = handlers.RetryAfter(serr, d)
	}
	if h.recordStatus[code] {
		return handlers.Permanent(err)
	}
	if check := sinkCheck(code, serr.Location, h.target); check != "" {
		return handlers.Unavailable(err, check)
	}
	switch {
	case code == http.StatusRequestTimeout || code >= 500:
		return err
	case code >= 300 && code < 600:
		return handlers.Permanent(serr)
	default: // an informational status the client passed on: not the record's fault
		return serr
	}
}

// sinkCheck says what to check when a status is the sink's refusal rather than the record's: a status that
// names the endpoint, the credentials or the sink's own health, which every record would meet. "" for a
// status that is the record's (400, 409, 422, ...) or may be (408, 500).
func sinkCheck(code int, location, target string) string {
	switch code {
	case http.StatusUnauthorized:
		return "the credentials: the signing secret, or the API key in --webhook-header (revoked or missing?)"
	case http.StatusProxyAuthRequired:
		return "the proxy's credentials"
	case http.StatusForbidden:
		return "the credentials' permissions (the API key's scope) and the URL: " + target
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusGone, http.StatusMisdirectedRequest,
		http.StatusUpgradeRequired, http.StatusHTTPVersionNotSupported:
		return "the URL: the receiver has no such endpoint: " + target
	case http.StatusTooManyRequests:
		return "the sink's rate limit: lower --webhook-max-rate or --webhook-max-in-flight"
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusNetworkAuthenticationRequired:
		return "the receiver's health, and what stands in front of it: " + target
	}
	if code >= 300 && code < 400 {
		if location != "" {
			return "the URL: the receiver redirects every request to " + location
		}
		return "the URL: the receiver redirects every request: " + target
	}
	return ""
}

// StatusError is the error for a response with a status other than 2xx. Handle returns it as is for a
// retryable status, and wrapped by handlers.Permanent or handlers.RetryAfter as the status says.
type StatusError struct {
	// URL is the request URL without userinfo and query.
	URL string
	// StatusCode is the response's status code.
	StatusCode int
	// Location is the redirect target of a 3xx response, without userinfo and query, or "".
	Location string
	// Body is an excerpt of the response body: at most Config.MaxErrorBody bytes of it on one line, followed
	// by "..." when the body was longer.
	Body string
}

// SinkStatus returns the status code, for the halt state (see handlers.StatusOf).
func (e *StatusError) SinkStatus() int { return e.StatusCode }

// Error returns "webhook POST <url>: <code> <reason>[ to <location>][: <body excerpt>]".
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook POST %s: %d", e.URL, e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		b.WriteString(" " + t)
	}
	if e.Location != "" {
		b.WriteString(" to " + e.Location)
	}
	if e.Body != "" {
		b.WriteString(": " + e.Body)
	}
	return b.String()
}

// excerpt reads at most limit bytes of body, with credentials redacted, and returns them as one line of
// valid UTF-8, followed by "..." when there was more.
func excerpt(body io.Reader, limit int, r redactor) string {
	// Read as much more as the longest credential, so that one the limit cuts through is still found.
	n := limit + 1 + r.longest
	b, _ := io.ReadAll(io.LimitReader(body, int64(n)))
	cut := len(b) == n
	text := r.redact(string(b))
	if len(text) > limit {
		text, cut = text[:limit], true
	}
	// A rune split by the cut is dropped with any other invalid bytes.
	s := strings.ToValidUTF8(text, "")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if cut {
		s += "..."
	}
	return s
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date, as a positive delay.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		secs = min(secs, uint64(math.MaxInt64/int64(time.Second)))
		return time.Duration(secs) * time.Second, secs > 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}

// ReadsColumns implements handlers.ColumnReader: the body column, when Config.BodyColumn is set.
func (h *Handler[T]) ReadsColumns() []string {
	if h.bodyColumn == "" {
		return nil
	}
	return []string{h.bodyColumn}
}
