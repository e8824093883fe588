package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/handlers/webhook"
)

var sentinels = []error{webhook.ErrMalformedSignature, webhook.ErrBadSignature, webhook.ErrSignatureExpired}

// checkSentinel fails unless err is nil or wraps exactly one of the documented sentinels, and returns it.
func checkSentinel(t *testing.T, err error) error {
	t.Helper()
	if err == nil {
		return nil
	}
	var found []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("error %q wraps %d of the sentinels, want exactly one", err, len(found))
	}
	return found[0]
}

// hmacKey is the key HMAC-SHA256 really uses for secret: a secret longer than the block is hashed, and a
// shorter one is padded with zero bytes. Two secrets with the same hmacKey sign identically (a property of
// HMAC, not of this package: "k" and "k\x00" are one key), so "another secret" means another hmacKey.
// Secrets from the CLI come from an environment variable and cannot hold NUL bytes at all.
func hmacKey(secret []byte) string {
	if len(secret) > sha256.BlockSize {
		s := sha256.Sum256(secret)
		secret = s[:]
	}
	return string(bytes.TrimRight(secret, "\x00"))
}

// FuzzVerify checks Sign and Verify on fuzzed secrets, bodies, times and headers:
//
//   - Verify never panics on any header, body, secret, tolerance and clock, and every error wraps exactly one
//     of ErrMalformedSignature, ErrBadSignature and ErrSignatureExpired.
//   - A header from Sign(secret, t, body) verifies for that secret and body (secret not empty) whenever the
//     clock is within the tolerance of the signed second, before or after, and fails with
//     ErrSignatureExpired (the signature matched) just outside it. The signed second is t.Unix(), as the
//     header carries whole seconds; times are kept within ±2^40 s of the epoch (±35,000 years), far beyond
//     any clock, so that time arithmetic cannot overflow.
//   - It fails with ErrBadSignature for any other body, for any other secret (other as an HMAC key, see
//     hmacKey), for an empty secret, and when the timestamp in the header is changed.
//   - An arbitrary header verifies only if it carries a v1 signature equal to the one Sign would make for its
//     own timestamp text, and so cannot be forged without the secret (checked for headers with one t=).
func FuzzVerify(f *testing.F) {
	f.Add([]byte("shared-secret"), []byte(`{"id":"42"}`), int64(1714557600), int64(999), int64(30), int64(300),
		[]byte(`{"id":"43"}`), []byte("other-secret"), "t=1714557600,v1=00")
	f.Add([]byte("k"), []byte(""), int64(0), int64(0), int64(0), int64(0), []byte("x"), []byte("k\x00"), "")
	f.Add([]byte("k"), []byte("b"), int64(-1), int64(500000000), int64(-300), int64(0), []byte("b "), []byte("K"),
		"v1=0000000000000000000000000000000000000000000000000000000000000000")
	f.Add([]byte(strings.Repeat("s", 65)), []byte("body"), int64(1), int64(1), int64(301), int64(int64(time.Minute)),
		[]byte("Body"), []byte(strings.Repeat("s", 64)), "t=1,t=1,v1=zz")
	f.Add([]byte(""), []byte("body"), int64(1714557600), int64(0), int64(0), int64(0), []byte("body"), []byte("x"),
		" t=+1 , v1= ")
	f.Add([]byte("s"), []byte("\x00\xff"), int64(math.MaxInt64), int64(-1), int64(math.MinInt64), int64(math.MaxInt64),
		[]byte(nil), []byte("s"), "t=9223372036854775808,v1=")
	f.Add([]byte("s"), []byte("b"), int64(1714557600), int64(0), int64(-1), int64(-5), []byte("c"), []byte("t"),
		"t=1714557600,v1=1,v1=2,x,=,t=")
	f.Fuzz(func(t *testing.T, secret, body []byte, unix, nanos, skew, tol int64, otherBody, otherSecret []byte,
		header string) {
		const span = 1 << 40 // seconds; see above
		unix %= span
		signedAt := time.Unix(unix, nanos%int64(time.Second))
		tolerance := time.Duration(tol)

		// Arbitrary headers: no panic, one sentinel, and no forgery.
		now := time.Unix(unix+skew%span, 0)
		err := checkSentinel(t, webhook.Verify(secret, header, body, tolerance, now))
		if err == nil {
			if len(secret) == 0 {
				t.Fatal("verified with an empty secret")
			}
			if !genuine(secret, header, body) {
				t.Fatalf("header %q verified for body %q without a signature Sign would make", header, body)
			}
		}

		if len(secret) == 0 {
			h := webhook.Sign(secret, signedAt, body)
			if got := checkSentinel(t, webhook.Verify(secret, h, body, tolerance, signedAt)); got != webhook.ErrBadSignature {
				t.Fatalf("empty secret: got %v, want ErrBadSignature", got)
			}
			return
		}

		h := webhook.Sign(secret, signedAt, body)
		eff := tolerance
		if eff <= 0 {
			eff = 5 * time.Minute
		}
		second := time.Unix(signedAt.Unix(), 0)
		// A clock offset within the tolerance, of either sign, from the skew.
		within := time.Duration(skew)
		if eff < math.MaxInt64 {
			within %= eff + 1
		} else if within == math.MinInt64 {
			within++
		}
		if err := webhook.Verify(secret, h, body, tolerance, second.Add(within)); err != nil {
			t.Fatalf("Sign(%q, %v, %q) = %q does not verify %s later with tolerance %s: %v", secret, signedAt, body,
				h, within, tolerance, err)
		}
		// Just outside the tolerance, where it can be represented.
		if eff < time.Duration(math.MaxInt64) {
			late := second.Add(eff + 1)
			if got := checkSentinel(t, webhook.Verify(secret, h, body, tolerance, late)); got != webhook.ErrSignatureExpired {
				t.Fatalf("%s after signing with tolerance %s: got %v, want ErrSignatureExpired", eff+1, tolerance, got)
			}
			early := second.Add(-eff - 1)
			if got := checkSentinel(t, webhook.Verify(secret, h, body, tolerance, early)); got != webhook.ErrSignatureExpired {
				t.Fatalf("%s before signing with tolerance %s: got %v, want ErrSignatureExpired", eff+1, tolerance, got)
			}
		}

		if !bytes.Equal(otherBody, body) {
			if got := checkSentinel(t, webhook.Verify(secret, h, otherBody, tolerance, second)); got != webhook.ErrBadSignature {
				t.Fatalf("header for body %q verified body %q: got %v, want ErrBadSignature", body, otherBody, got)
			}
		}
		if hmacKey(otherSecret) != hmacKey(secret) {
			got := checkSentinel(t, webhook.Verify(otherSecret, h, body, tolerance, second))
			if got != webhook.ErrBadSignature {
				t.Fatalf("header signed with %q verified with %q: got %v, want ErrBadSignature", secret, otherSecret, got)
			}
		}
		// The timestamp is signed: moving it breaks the signature (before any tolerance check).
		moved := strings.Replace(h, "t="+strconv.FormatInt(signedAt.Unix(), 10)+",",
			"t="+strconv.FormatInt(signedAt.Unix()+1, 10)+",", 1)
		if got := checkSentinel(t, webhook.Verify(secret, moved, body, tolerance, second)); got != webhook.ErrBadSignature {
			t.Fatalf("header %q with its timestamp moved (%q): got %v, want ErrBadSignature", h, moved, got)
		}
	})
}

// genuine reports whether header carries, among its v1 entries, the signature Sign makes for body with
// secret at the header's own t= text. It is an independent, simplified reading of the documented format.
func genuine(secret []byte, header string, body []byte) bool {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(strings.TrimSpace(header), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, strings.ToLower(v))
		}
	}
	if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
		return false
	}
	// The MAC covers the timestamp text exactly as sent, which need not be n's canonical form ("t=01").
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "." + string(body)))
	wantSig := hex.EncodeToString(m.Sum(nil))
	for _, s := range sigs {
		if s == wantSig {
			return true
		}
	}
	return false
}

// FuzzVerifyRequest checks VerifyRequest on fuzzed requests: it never panics, its errors wrap exactly one
// sentinel, it always puts the whole body back on the request, and a request signed now with Sign verifies
// while the same request with another body does not.
func FuzzVerifyRequest(f *testing.F) {
	f.Add([]byte("shared-secret"), []byte(`{"id":"42"}`), "t=1,v1=00", true, int64(0))
	f.Add([]byte(""), []byte(""), "", false, int64(5))
	f.Add([]byte("s"), []byte("body"), "t=1714557600,v1=zz", true, int64(-301))
	f.Fuzz(func(t *testing.T, secret, body []byte, header string, setHeader bool, skew int64) {
		req, err := http.NewRequest(http.MethodPost, "http://receiver.example/hook", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if setHeader {
			req.Header.Set(webhook.SignatureHeader, header)
		}
		checkSentinel(t, webhook.VerifyRequest(secret, req, 0))
		if got, err := io.ReadAll(req.Body); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body not put back: %q, %v; want %q", got, err, body)
		}

		// Signed now, give or take a minute: verifies with the default tolerance of five minutes.
		signed := time.Now().Add(time.Duration(skew % int64(time.Minute)))
		req, _ = http.NewRequest(http.MethodPost, "http://receiver.example/hook", bytes.NewReader(body))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, signed, body))
		err = checkSentinel(t, webhook.VerifyRequest(secret, req, 0))
		switch {
		case len(secret) == 0 && err != webhook.ErrBadSignature:
			t.Fatalf("empty secret: got %v, want ErrBadSignature", err)
		case len(secret) > 0 && err != nil:
			t.Fatalf("freshly signed request does not verify: %v", err)
		}
		req, _ = http.NewRequest(http.MethodPost, "http://receiver.example/hook", bytes.NewReader(append(bytes.Clone(body), 'x')))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, signed, body))
		if err := checkSentinel(t, webhook.VerifyRequest(secret, req, 0)); err != webhook.ErrBadSignature {
			t.Fatalf("request with a changed body: got %v, want ErrBadSignature", err)
		}
	})
}
