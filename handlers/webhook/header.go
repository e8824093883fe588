package webhook

import (
	"net/http"
	"slices"
	"strings"
)

// validHeaderName reports whether name is an HTTP header field name: one token of RFC 9110.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v may be sent as a header value: no line break, no NUL and no other
// control character but a tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// minRedacted is the length from which a configured header value, and each word of it, is taken for a
// credential: "Bearer sk_live_..." puts the key in a word of its own, which an API may echo without the
// "Bearer ". Shorter values (a version number, "json") would hide ordinary text.
const minRedacted = 8

// redactor hides credentials in text that came back from the receiver, such as the excerpt of an error
// body, which ends up in the cursor row, the logs and status: some APIs echo the key they refused.
type redactor struct {
	secrets []string // longest first, so that a value is hidden before the words in it
	longest int
}

const redacted = "[redacted]"

// newRedactor hides secret, and every value of headers and each word of those values that is at least
// minRedacted long.
func newRedactor(secret []byte, headers http.Header) redactor {
	var r redactor
	add := func(s string, least int) {
		if s = strings.TrimSpace(s); len(s) >= least && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
			r.longest = max(r.longest, len(s))
		}
	}
	add(string(secret), 1)
	for _, vs := range headers {
		for _, v := range vs {
			add(v, minRedacted)
			for _, w := range strings.Fields(v) {
				add(w, minRedacted)
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// redact returns s with every credential replaced by [redacted].
func (r redactor) redact(s string) string {
	for _, x := range r.secrets {
		s = strings.ReplaceAll(s, x, redacted)
	}
	return s
}
