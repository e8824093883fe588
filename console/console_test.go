package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
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
	require.Contains(t, body, `href="./process/payments"`)
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
		name, remote, host string
		header             []string
		want               int
	}{
		{"loopback", "127.0.0.1:5000", "127.0.0.1:8080", nil, http.StatusOK},
		{"loopback v6", "[::1]:5000", "[::1]:8080", nil, http.StatusOK},
		{"localhost", "127.0.0.1:5000", "localhost:8080", nil, http.StatusOK},
		{"another machine", "192.0.2.7:5000", "127.0.0.1:8080", nil, http.StatusForbidden},
		{"a rebound name", "127.0.0.1:5000", "evil.example:8080", nil, http.StatusForbidden},
		{"through a proxy", "127.0.0.1:5000", "127.0.0.1:8080", []string{"X-Forwarded-For", "192.0.2.7"}, http.StatusForbidden},
		{"through a proxy, standard header", "127.0.0.1:5000", "127.0.0.1:8080", []string{"Forwarded", "for=192.0.2.7"}, http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr, req.Host = tc.remote, tc.host
		for i := 0; i+1 < len(tc.header); i += 2 {
			req.Header.Set(tc.header[i], tc.header[i+1])
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		require.Equal(t, tc.want, rec.Code, tc.name)
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
	// A database that cannot be reached: the error pages say why, and nothing of the connection's
	// password nor of the token.
	pool, err := pgxpool.New(context.Background(), "postgres://inorder:db-topsecret-pw@127.0.0.1:1/app?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := console.New(console.Config{Pool: pool, Token: token, AllowActions: true})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	for _, p := range []string{"/", "/process/payments"} {
		code, body := get(t, http.DefaultClient, srv.URL+p, "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusInternalServerError, code, body)
		require.Contains(t, body, "could not read the cursor rows")
		require.NotContains(t, body, "topsecret")
	}
}

func TestSignInGoesBackToTheConsoleOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{Token: token})
	resp, err := noRedirects.PostForm(srv.URL+"/https:evil.example", url.Values{"console_token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err := url.Parse(srv.URL + "/https:evil.example")
	require.NoError(t, err)
	next, err := loc.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, loc.Host, next.Host, "a sign-in goes back to the page it was on: %s", resp.Header.Get("Location"))
}

func TestActionsWorkUnderAPrefixAndForAnyName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A second process, named with a colon, halted on record 3 too.
	b.runProcess(t, "orders:v2")
	c, err := console.New(console.Config{Pool: b.db.Pool, AllowActions: true})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/admin/inorder/", http.StripPrefix("/admin/inorder", c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	cl := &http.Client{Jar: jar, CheckRedirect: noRedirects.CheckRedirect}

	overview, err := url.Parse(srv.URL + "/admin/inorder/")
	require.NoError(t, err)
	code, page := get(t, cl, overview.String())
	require.Equal(t, http.StatusOK, code)
	link := regexp.MustCompile(`href="([^"]*orders[^"]*)"`).FindStringSubmatch(page)
	require.NotNil(t, link, page)
	pageURL, err := overview.Parse(link[1])
	require.NoError(t, err)
	require.Equal(t, "/admin/inorder/process/orders:v2", pageURL.Path)

	code, page = get(t, cl, pageURL.String())
	require.Equal(t, http.StatusOK, code, page)
	form := regexp.MustCompile(`action="([^"]*/action/pause)"`).FindStringSubmatch(page)
	require.NotNil(t, form, page)
	target, err := pageURL.Parse(form[1])
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/admin/inorder/process/orders:v2/action/pause", target.String())
	csrf := csrfField.FindStringSubmatch(page)[1]
	resp, err := cl.PostForm(target.String(), url.Values{"csrf": {csrf}, "actor": {"ada"}, "reason": {"maintenance"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	back, err := target.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/admin/inorder/process/orders:v2", back.Path, "back on the process page, under the prefix")
	procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "orders:v2"})
	require.NoError(t, err)
	require.True(t, procs[0].Info.Paused)
}

func TestActorFuncNamesWhoActs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{AllowActions: true, ActorFunc: func(r *http.Request) string {
		return r.Header.Get("X-Authenticated-User") // as the mounting service's own sign-in would
	}})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: noRedirects.CheckRedirect}
	_, page := get(t, c, srv.URL+"/process/payments")
	require.NotContains(t, page, `name="actor"`, "the forms do not ask for a name the service knows")
	csrf := csrfField.FindStringSubmatch(page)[1]
	post := func(user string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/process/payments/action/pause",
			strings.NewReader(url.Values{"csrf": {csrf}, "reason": {"deploy"}, "actor": {"mallory"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Authenticated-User", user)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusBadRequest, post(""), "no one named: refused")
	require.Equal(t, http.StatusSeeOther, post("grace"))
	entries, err := cursor.Audit(context.Background(), b.db.Pool, cursor.AuditOpts{Process: "payments", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "grace (console)", entries[0].Actor, "the service's name, not the form's")
}

// A stream waiting for its sink shows the sink's outage and what to check, and offers no skip: skipping
// the record would not help.
func TestConsoleShowsASinkOutageWithoutASkip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cc, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[payment]{
		Process: "outage", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source: inordertype.Source{Table: "payments", KeyColumn: "customer", Columns: []string{"id", "customer"}},
		Handler: handlers.HandlerFunc[payment](func(context.Context, *handlers.Record[payment]) error {
			return handlers.Unavailable(&statusErr{code: 404}, "the URL: the receiver has no such endpoint")
		}),
		PollInterval: 20 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: zerolog.Nop(),
	})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "outage"})
		return err == nil && len(procs) == 1 && procs[0].Info.Status == cursor.StatusSinkUnavailable
	}, 20*time.Second, 10*time.Millisecond)

	srv := b.serve(t, console.Config{AllowActions: true})
	code, page := get(t, http.DefaultClient, srv.URL+"/process/outage")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "Waiting for the sink at record")
	require.Contains(t, page, "the URL: the receiver has no such endpoint")
	require.Contains(t, page, "Retry now", "an operator may still try again at once")
	require.NotContains(t, page, "Skip record", "no skip for the sink's outage")
	_, overview := get(t, http.DefaultClient, srv.URL+"/")
	require.Contains(t, overview, "sink unavailable")
}

// A stream waiting for a column that a migration renamed shows what it waits for and what to do.
func TestConsoleShowsAStreamWaitingForItsSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cc, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[payment]{
		Process: "shaped", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source:       inordertype.Source{Table: "payments", KeyColumn: "customer", Columns: []string{"id", "customer"}},
		Handler:      handlers.HandlerFunc[payment](func(context.Context, *handlers.Record[payment]) error { return nil }),
		PollInterval: 20 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: zerolog.Nop(),
	})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "shaped"})
		return err == nil && len(procs) == 1 && procs[0].Info.Status == cursor.StatusIdle
	}, 20*time.Second, 10*time.Millisecond, "the stream delivered the rows before the migration")
	b.db.Exec(t, "ALTER TABLE payments RENAME COLUMN customer TO client")
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "shaped"})
		return err == nil && len(procs) == 1 && procs[0].Info.Status == cursor.StatusSourceChanged
	}, 20*time.Second, 10*time.Millisecond)

	srv := b.serve(t, console.Config{AllowActions: true})
	code, page := get(t, http.DefaultClient, srv.URL+"/process/shaped")
	require.Equal(t, http.StatusOK, code)
	page = html.UnescapeString(page)
	require.Contains(t, page, "Waiting for the source table")
	require.Contains(t, page, `column public.payments.customer, the key column, is gone`)
	require.Contains(t, page, `ALTER TABLE "public"."payments" RENAME COLUMN "client" TO "customer"`)
	_, overview := get(t, http.DefaultClient, srv.URL+"/")
	require.Contains(t, overview, "source changed")
}

// A process page says which tracking the stream reads by: the insert clock, or created_at as opted in,
// with the command that adds the clock.
func TestConsoleShowsTheTracking(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{})
	code, page := get(t, http.DefaultClient, srv.URL+"/process/payments")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "the table's insert clock")
	require.NotContains(t, page, "inorder_at", "the halted record's excerpt leaves the clock out")

	b.db.Exec(t, `CREATE TABLE refunds (id bigserial PRIMARY KEY, customer text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()); CREATE INDEX ON refunds (created_at, id);
		INSERT INTO refunds (customer) VALUES ('a')`)
	cc, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[payment]{
		Process: "refunds", ClientConfig: processor.ClientConfig{ConnConfig: cc}, StartFrom: inordertype.StartFromBeginning,
		Source:       inordertype.Source{Table: "refunds", Columns: []string{"id", "customer"}, Horizon: inordertype.HorizonWriters},
		Handler:      handlers.HandlerFunc[payment](func(context.Context, *handlers.Record[payment]) error { return nil }),
		PollInterval: 20 * time.Millisecond, Logger: zerolog.Nop(),
	})
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	require.Eventually(t, func() bool {
		procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: "refunds"})
		return err == nil && len(procs) == 1 && procs[0].Info.Source.Horizon == inordertype.HorizonWriters
	}, 20*time.Second, 10*time.Millisecond)
	_, page = get(t, http.DefaultClient, srv.URL+"/process/refunds")
	require.Contains(t, page, "<b>writers</b>, opted in")
	require.Contains(t, page, "inorder migrate --table public.refunds")
}
