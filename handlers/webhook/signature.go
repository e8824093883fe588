package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names the handler sets on requests.
const (
	// SignatureHeader carries the request's signature under SignatureInorder:
	// t=<unix seconds>,v1=<hex HMAC-SHA256>.
	SignatureHeader = "Inorder-Signature"
	// IdempotencyKeyHeader carries <process>:<record id>, the same on every delivery of a record, unless
	// Config.IdempotencyHeader names another header for it.
	IdempotencyKeyHeader = "Idempotency-Key"
	// AttemptHeader carries the delivery attempt, 1 the first time.
	AttemptHeader = "Inorder-Attempt"
)

// SignatureScheme is how a Handler signs its requests, chosen with Config.Signature. Every scheme signs
// the exact body bytes with an HMAC-SHA256 keyed with Config.Secret and the time of signing, so that a
// receiver can tell a genuine, fresh request from a forged or replayed one.
type SignatureScheme string

const (
	// SignatureInorder puts the Inorder-Signature header on each request:
	// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">. It is Stripe's scheme, so receivers verify it
	// with Verify or VerifyRequest, or with stripe-go's webhook.ValidatePayload(body, header, secret). It
	// is the default: the empty SignatureScheme means it.
	SignatureInorder SignatureScheme = "inorder"
	// SignatureStandardWebhooks signs as the Standard Webhooks specification (standardwebhooks.com) says,
	// with three headers: webhook-id (the idempotency key, <process>:<record id>), webhook-timestamp (Unix
	// seconds) and webhook-signature (v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">). Receivers
	// verify it with the specification's official libraries.
	SignatureStandardWebhooks SignatureScheme = "standard-webhooks"
	// SignatureNone sends no signature, for APIs that authenticate the sender by a header of
	// Config.Headers (an Authorization bearer token) instead. Config.Secret must then be empty.
	SignatureNone SignatureScheme = "none"
)

// defaultTolerance is how far a signature's timestamp may be from the receiver's clock when Verify is given
// no tolerance.
const defaultTolerance = 5 * time.Minute

// Errors returned by Verify and VerifyRequest; each failure wraps exactly one of them.
var (
	// ErrMalformedSignature means the signature header is missing or cannot be parsed.
	ErrMalformedSignature = errors.New("webhook: malformed signature header")
	// ErrBadSignature means no signature in the header matches the body and secret: the body was changed,
	// or it was signed with another secret.
	ErrBadSignature = errors.New("webhook: signature does not match")
	// ErrSignatureExpired means the signature matches, but its timestamp is further from now than the
	// tolerance: the request may be a replay.
	ErrSignatureExpired = errors.New("webhook: signature timestamp outside tolerance")
)

// Sign returns the Inorder-Signature header value for body signed with secret at time t:
// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<unix seconds>.<body>">.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is the HMAC-SHA256 of "<prefix>.<body>" keyed with secret: prefix is the timestamp (SignatureInorder)
// or "<id>.<timestamp>" (SignatureStandardWebhooks).
func mac(secret []byte, prefix string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(prefix))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks that header, an Inorder-Signature value, signs body with secret, and that its timestamp is
// within tolerance of now, before or after; a tolerance of zero or less means 5 minutes. It returns
// nil for a genuine, fresh request, and otherwise an error wrapping ErrMalformedSignature, ErrBadSignature or
// ErrSignatureExpired. The comparison takes constant time, and any one of several v1 entries may match.
func Verify(secret []byte, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret to verify with", ErrBadSignature)
	}
	tsText, ts, sigs, err := parseSignature(header)
	if err != nil {
		return err
	}
	want := mac(secret, tsText, body)
	match := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			match = true
		}
	}
	if !match {
		return ErrBadSignature
	}
	if tolerance <= 0 {
		tolerance = defaultTolerance
	}
	signed := time.Unix(ts, 0)
	if age := now.Sub(signed); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now, beyond the tolerance of %s", ErrSignatureExpired,
			signed.UTC().Format(time.RFC3339), age.Round(time.Second), tolerance)
	}
	return nil
}

// parseSignature splits a header into its timestamp, as text and as a number, and its v1 signatures.
func parseSignature(header string) (string, int64, [][]byte, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return "", 0, nil, fmt.Errorf("%w: no %s header", ErrMalformedSignature, SignatureHeader)
	}
	var (
		tsText string
		ts     int64
		sigs   [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", 0, nil, fmt.Errorf("%w: %q is not key=value", ErrMalformedSignature, part)
		}
		switch k {
		case "t":
			if tsText != "" {
				return "", 0, nil, fmt.Errorf("%w: more than one timestamp", ErrMalformedSignature)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || v[0] == '+' {
				return "", 0, nil, fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrMalformedSignature, v)
			}
			tsText, ts = v, n
		case "v1":
			s, err := hex.DecodeString(v)
			if err != nil || len(s) != sha256.Size {
				return "", 0, nil, fmt.Errorf("%w: v1 is not %d hex digits", ErrMalformedSignature, 2*sha256.Size)
			}
			sigs = append(sigs, s)
		}
	}
	if tsText == "" {
		return "", 0, nil, fmt.Errorf("%w: no timestamp (t=)", ErrMalformedSignature)
	}
	if len(sigs) == 0 {
		return "", 0, nil, fmt.Errorf("%w: no v1 signature", ErrMalformedSignature)
	}
	return tsText, ts, sigs, nil
}

// VerifyRequest reads r's body, verifies it against r's Inorder-Signature header as Verify does with the
// current time, and puts the body back on r so that the handler can decode it afterwards. Wrap r.Body with
// http.MaxBytesReader first to bound what it reads.
func VerifyRequest(secret []byte, r *http.Request, tolerance time.Duration) error {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(r.Body)
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("webhook: read request body: %w", err)
		}
	}
	return Verify(secret, r.Header.Get(SignatureHeader), body, tolerance, time.Now())
}
