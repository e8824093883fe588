package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	sessionCookie = "inorder_console_session"
	csrfCookie    = "inorder_console_csrf"
)

// sessionFor is how long a sign-in lasts.
const sessionFor = 12 * time.Hour

// session is a session cookie's value for a sign-in that lasts until expires: the expiry and a MAC of it
// under the token, so that the cookie holds neither the token nor anything that outlives its expiry or
// a change of token.
func (c *Console) session(expires time.Time) string {
	at := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha256.New, []byte(c.cfg.Token))
	m.Write([]byte("inorder console session until " + at))
	return at + "." + hex.EncodeToString(m.Sum(nil))
}

// authenticated reports whether r carries the token (as a bearer token) or a session cookie that has
// not expired, compared in constant time.
func (c *Console) authenticated(r *http.Request) bool {
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equal(auth, c.cfg.Token)
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	at, _, _ := strings.Cut(ck.Value, ".")
	unix, err := strconv.ParseInt(at, 10, 64)
	if err != nil || time.Now().After(time.Unix(unix, 0)) {
		return false
	}
	return equal(ck.Value, c.session(time.Unix(unix, 0)))
}

// secure says whether cookies get the Secure attribute: served over TLS, or behind a proxy that says it
// terminated TLS.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// login checks the token typed into the login form and, when it is right, sets the session cookie and
// goes back to the page. The form is a POST like the actions, under the same cross-origin check.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if err := c.guard.Check(r); err != nil || !equal(r.PostFormValue("console_token"), c.cfg.Token) {
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, "login", map[string]any{"Failed": true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: c.session(time.Now().Add(sessionFor)), Path: "/",
		MaxAge: int(sessionFor / time.Second), HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode})
	w.Header().Set("Location", back(r))
	w.WriteHeader(http.StatusSeeOther)
}

// csrfToken returns the visitor's CSRF token, setting a new one in a cookie when it has none: each form
// carries it, and an action is accepted only when the form's token matches the cookie's, which another
// site can neither read nor set.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 64 {
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	t := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: t, Path: "/", HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode})
	return t
}

// csrfValid reports whether a POST's form carries the CSRF token of its cookie.
func (c *Console) csrfValid(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	return equal(r.PostFormValue("csrf"), ck.Value)
}

// equal compares secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
