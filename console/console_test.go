package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/cursor"
)

const token = "console-topsecret-token-0123456789"

func get(t *testing.T, c *http.Client, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// audited counts the audit entries of payments.
func audited(t *testing.T, b *bundle) int {
	t.Helper()
	entries, err := cursor.Audit(context.Background(), b.db.Pool, cursor.AuditOpts{Process: "payments"})
	require.NoError(t, err)
	return len(entries)
}

func TestConsoleRefusesWhoeverHasNoToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{Token: token, AllowActions: true})

	code, body := get(t, http.DefaultClient, srv.URL+"/")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "Sign in")
	require.NotContains(t, body, "payments", "nothing of the streams before the token")
	code, _ = get(t, http.DefaultClient, srv.URL+"/process/payments", "Authorization", "Bearer wrong-"+token)
	require.Equal(t, http.StatusUnauthorized, code)

	code, body = get(t, http.DefaultClient, srv.URL+"/", "Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="process/payments"`)
	require.NotContains(t, body, token)

	// The login form sets a session cookie that is not the token.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(srv.URL+"/", url.Values{"console_token": {"wrong"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, err = c.PostForm(srv.URL+"/", url.Values{"console_token": {token}})
	require.NoError(t, err)
	body1, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "signed in, and back on the overview")
	require.Contains(t, string(body1), "payments")
	u, _ := url.Parse(srv.URL)
	for _, ck := range jar.Cookies(u) {
		require.NotContains(t, ck.Value, token)
	}
}

func TestConsoleWithoutATokenAnswersLoopbackOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := console.New(console.Config{Pool: b.db.Pool})
	require.NoError(t, err)
	for _, tc := range []struct {
		remote string
		want   int
	}{{"127.0.0.1:5000", http.StatusOK}, {"[::1]:5000", http.StatusOK}, {"192.0.2.7:5000", http.StatusForbidden}} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		require.Equal(t, tc.want, rec.Code, tc.remote)
	}

	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:8080", true}, {"localhost:8080", true}, {"[::1]:8080", true}, {":8080", false}, {"0.0.0.0:8080", false}, {"10.0.0.5:8080", false}} {
		err := console.CheckAddr(tc.addr, console.Config{})
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.addr, err)
		require.NoError(t, console.CheckAddr(tc.addr, console.Config{Token: token}), "with a token, any address")
	}
}

func TestConsoleRefusesAForgedPost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{AllowActions: true})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: noRedirects.CheckRedirect}
	code, page := get(t, c, srv.URL+"/process/payments")
	require.Equal(t, http.StatusOK, code)
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "the forms carry a CSRF token")
	form := url.Values{"actor": {"mallory"}, "reason": {"forged"}}
	before := audited(t, b)

	for name, tc := range map[string]struct {
		csrf   string
		header []string
	}{
		"without the CSRF token":  {"", nil},
		"with another CSRF token": {strings.Repeat("0", 64), nil},
		"from another site":       {m[1], []string{"Sec-Fetch-Site", "cross-site"}},
		"from another origin":     {m[1], []string{"Origin", "https://evil.example"}},
	} {
		f := url.Values{"csrf": {tc.csrf}}
		for k, v := range form {
			f[k] = v
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/process/payments/action/pause", strings.NewReader(f.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(tc.header); i += 2 {
			req.Header.Set(tc.header[i], tc.header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
	}
	require.Equal(t, before, audited(t, b), "no forged action was taken")

	// The same form with its token goes through.
	form.Set("csrf", m[1])
	resp, err := c.PostForm(srv.URL+"/process/payments/action/pause", form)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "../../payments?done=pause", resp.Header.Get("Location"))
	require.Equal(t, before+1, audited(t, b))
}

func TestReadOnlyConsoleHasNoActionThatWorks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: noRedirects.CheckRedirect}
	code, page := get(t, c, srv.URL+"/process/payments")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "<form", "a read-only console shows no form")
	require.Contains(t, page, "Read-only")
	require.Contains(t, page, "payments API answered 422: card_declined", "the halted record's error")
	require.Contains(t, page, "<b>422</b>", "the sink's answer")

	// Even with a good CSRF token (from an overview, which sets it), every action is refused.
	_, _ = get(t, c, srv.URL+"/")
	u, _ := url.Parse(srv.URL)
	var csrf string
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "inorder_console_csrf" {
			csrf = ck.Value
		}
	}
	before := audited(t, b)
	for _, action := range []string{"pause", "resume", "retry", "skip", "rewind", "redrive"} {
		resp, err := c.PostForm(srv.URL+"/process/payments/action/"+action,
			url.Values{"csrf": {csrf}, "actor": {"ops"}, "reason": {"try"}, "record": {"3"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, action)
	}
	require.Equal(t, before, audited(t, b))
}

func TestConsolePagesShowNoSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{AllowActions: true})
	pw := ""
	if u, err := url.Parse(b.db.URL); err == nil {
		pw, _ = u.User.Password()
	}
	for _, p := range []string{"/", "/process/payments", "/process/nope"} {
		_, body := get(t, http.DefaultClient, srv.URL+p)
		require.NotContains(t, body, b.db.URL)
		if pw != "" {
			require.NotContains(t, body, pw)
		}
	}
}
