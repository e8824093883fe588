package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/processor"
)

// headerFlag collects the values of a repeatable --webhook-header as given. webhookHeaders checks and
// expands them; Set never refuses one, since the flag package would quote a refused value in its error and
// a value may hold a credential.
type headerFlag []string

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// webhookHeaders turns --webhook-header values, Name=value (or Name: value, as curl writes them), into
// headers, replacing each ${VAR} in a value by the environment variable VAR as lookup finds it. A
// variable that is unset or empty, or holds a line break, is an error naming the header and the
// variable. No error ever shows a value: it may be a credential.
func webhookHeaders(values []string, lookup func(string) (string, bool)) (http.Header, error) {
	if len(values) == 0 {
		return nil, nil
	}
	h := http.Header{}
	for i, v := range values {
		cut := strings.IndexAny(v, ":=") // neither may appear in a header name
		if cut < 0 {
			return nil, usageErr("--webhook-header #%d has no \"=\": give Name=value", i+1)
		}
		name, raw := strings.TrimSpace(v[:cut]), strings.TrimSpace(v[cut+1:])
		if !validHeaderName(name) {
			return nil, usageErr("--webhook-header #%d: what comes before the \"=\" is not an HTTP header name "+
				"(letters, digits and !#$%%&'*+-.^_`|~)", i+1)
		}
		value, err := expandEnv(raw, lookup)
		if err != nil {
			return nil, usageErr("--webhook-header %s: %s", name, err)
		}
		if value == "" {
			return nil, usageErr("--webhook-header %s has an empty value", name)
		}
		if hasControl(value) {
			return nil, usageErr("--webhook-header %s: the value holds a line break or another control character", name)
		}
		h.Add(name, value)
	}
	return h, nil
}

// expandEnv replaces each ${VAR} in s by the value of the environment variable VAR. Nothing else is
// special: a $ not followed by { stays as it is.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		start := strings.Index(s, "${")
		if start < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.IndexByte(s[start:], '}')
		if end < 0 {
			return "", errors.New(`a "${" has no closing "}"`)
		}
		name := s[start+2 : start+end]
		if !validEnvName(name) {
			return "", errors.New(`a "${...}" must hold an environment variable's name: letters, digits and _, ` +
				"not starting with a digit")
		}
		v, ok := lookup(name)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set or empty", name)
		}
		if hasControl(v) {
			return "", fmt.Errorf("environment variable %s holds a line break or another control character", name)
		}
		b.WriteString(s[:start])
		b.WriteString(v)
		s = s[start+end+1:]
	}
}

// hasControl reports whether s holds a character a header value cannot: a line break, NUL or another
// control character but a tab.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f })
}

func validEnvName(name string) bool {
	if name == "" || ('0' <= name[0] && name[0] <= '9') {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validHeaderName reports whether name is an HTTP token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// webhookSet reports whether any --webhook-* flag differs from its default.
func (f *runFlags) webhookSet() bool {
	return f.webhookURL != "" || f.webhookSecretEnv != "" || f.webhookInFlight != 1 || len(f.webhookHeaders) > 0 ||
		f.webhookBodyColumn != "" || f.webhookIdempotency != webhook.IdempotencyKeyHeader ||
		f.webhookSignature != string(webhook.SignatureInorder) || f.webhookMaxRate != "" || f.webhookRecordCodes != ""
}

// newWebhook builds the webhook handler from its flags. Secrets come from the environment only, and no
// error shows one.
func (f *runFlags) newWebhook(cfg processor.Config[handlers.Row]) (handlers.Handler[handlers.Row], error) {
	scheme := webhook.SignatureScheme(f.webhookSignature)
	switch scheme {
	case webhook.SignatureInorder, webhook.SignatureStandardWebhooks:
		if f.webhookURL == "" || f.webhookSecretEnv == "" {
			return nil, usageErr("--handler webhook needs --webhook-url and --webhook-secret-env (or --webhook-signature none)")
		}
	case webhook.SignatureNone:
		if f.webhookURL == "" {
			return nil, usageErr("--handler webhook needs --webhook-url")
		}
		if f.webhookSecretEnv != "" {
			return nil, usageErr("--webhook-secret-env contradicts --webhook-signature none: nothing is signed")
		}
	default:
		return nil, usageErr("--webhook-signature must be inorder, standard-webhooks or none, got %q", f.webhookSignature)
	}
	var secret []byte
	if f.webhookSecretEnv != "" {
		s := os.Getenv(f.webhookSecretEnv)
		if s == "" {
			return nil, usageErr("--webhook-secret-env names %s, which is not set or empty", f.webhookSecretEnv)
		}
		if scheme == webhook.SignatureStandardWebhooks {
			key, ok := strings.CutPrefix(s, "whsec_")
			if _, err := base64.StdEncoding.DecodeString(key); !ok || err != nil || key == "" {
				return nil, usageErr("--webhook-secret-env names %s, which does not hold a Standard Webhooks secret: "+
					"whsec_ followed by the key in base64", f.webhookSecretEnv)
			}
		}
		secret = []byte(s)
	}
	if err := checkWebhookURL(f.webhookURL); err != nil {
		return nil, err
	}
	bound := handlerTimeout(cfg)
	f.webhookTimeout = sinkTimeout(f.webhookTimeout, bound)
	if f.webhookTimeout <= 0 || f.webhookTimeout >= bound {
		return nil, usageErr("--webhook-timeout (%s) must be positive and shorter than the handler "+
			"timeout (%s: --handler-timeout, by default the smaller of half --idle-timeout and a third of --lease)",
			f.webhookTimeout, bound)
	}
	if f.webhookInFlight < 1 {
		return nil, usageErr("--webhook-max-in-flight must be at least 1, got %d", f.webhookInFlight)
	}
	if f.webhookBodyColumn != "" && len(cfg.Source.Columns) > 0 && !slices.Contains(cfg.Source.Columns, f.webhookBodyColumn) {
		return nil, usageErr("--webhook-body-column %q is not among --columns", f.webhookBodyColumn)
	}
	if !validHeaderName(f.webhookIdempotency) {
		return nil, usageErr("--webhook-idempotency-header %q is not an HTTP header name", f.webhookIdempotency)
	}
	headers, err := webhookHeaders(f.webhookHeaders, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	rate, err := parseRate(f.webhookMaxRate)
	if err != nil {
		return nil, err
	}
	var recordCodes []int
	for _, v := range strings.FieldsFunc(f.webhookRecordCodes, func(r rune) bool { return r == ',' || r == ' ' }) {
		code, err := strconv.Atoi(v)
		if err != nil || code < 300 || code > 599 {
			return nil, usageErr("--webhook-record-status %q: %q is no failing HTTP status (300 to 599)", f.webhookRecordCodes, v)
		}
		recordCodes = append(recordCodes, code)
	}
	h, err := webhook.New[handlers.Row](webhook.Config{
		URL: f.webhookURL, Secret: secret, Signature: scheme, Timeout: f.webhookTimeout,
		Headers: headers, IdempotencyHeader: f.webhookIdempotency, BodyColumn: f.webhookBodyColumn,
		MaxRate: rate, RecordStatuses: recordCodes, Envelope: f.webhookEnvelope,
	})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return h, nil
}

// parseRate reads --webhook-max-rate: "100", "100/s" or "6000/m"; "" is no bound.
func parseRate(v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	num, unit, _ := strings.Cut(strings.TrimSpace(v), "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	per := map[string]float64{"": 1, "s": 1, "m": 60, "min": 60}[strings.TrimSpace(unit)]
	if err != nil || n <= 0 || per == 0 {
		return 0, usageErr("--webhook-max-rate %q: give requests a second, as in 100/s (or a minute, as in 6000/m)", v)
	}
	return n / per, nil
}

// checkWebhookURL refuses a --webhook-url that is not an http or https URL with a host, in the flag's
// words, and says to add the scheme when it lacks one (127.0.0.1:8092/charge). A URL that may hold a
// password (user info) is not repeated.
func checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	if !strings.Contains(raw, "://") {
		if strings.Contains(raw, "@") {
			return usageErr("--webhook-url has no scheme: start it with http:// or https://")
		}
		return usageErr("--webhook-url %q has no scheme: start it with http:// or https://, as in %q", raw, "http://"+raw)
	}
	return usageErr("--webhook-url must be an http:// or https:// URL with a host")
}
