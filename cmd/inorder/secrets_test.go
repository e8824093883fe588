package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoSecretIsPrinted: the database password, the webhook secret and a header value taken from the
// environment appear in no subcommand's help, in no log line of a processor that starts, fails against a
// sink that echoes its request back and cannot reach its database, and in no status output.
func TestNoSecretIsPrinted(t *testing.T) {
	t.Parallel()
	const password, secret, header = "pw-Secret-1", "whsec-Secret-2", "hdr-Secret-3"
	b := setup(t)
	b.book(t, 2, "1")
	// The test cluster trusts loopback, so any password connects; the URL carries one all the same.
	url := strings.Replace(b.db.URL, "postgres://postgres@", "postgres://postgres:"+password+"@", 1)
	env := []string{"DATABASE_URL=" + url, "HOOK_SECRET=" + secret, "API_KEY=" + header}
	check := func(what, out string) {
		t.Helper()
		for _, s := range []string{password, secret, header} {
			require.NotContains(t, out, s, "%s shows a secret", what)
		}
	}

	for _, cmd := range realMainCommands {
		_, stdout, stderr := runBinary(t, env, cmd, "--help")
		check("inorder "+cmd+" --help", stdout+stderr)
		require.Contains(t, stdout+stderr, "-database-url", cmd)
	}

	// A sink that answers with everything it was sent: headers and body.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	defer sink.Close()
	p := startBinary(t, env, "run", "--process", "billing", "--table", "bookings", "--start-from", "beginning",
		"--poll-interval", "20ms", "--retry-min", "20ms", "--retry-max", "50ms", "--handler", "webhook",
		"--webhook-url", sink.URL, "--webhook-secret-env", "HOOK_SECRET", "--webhook-header", "Authorization=Bearer ${API_KEY}")
	require.Eventually(t, func() bool { return strings.Contains(p.logs(), "stream halted") }, 20*time.Second,
		10*time.Millisecond, p.logs())
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"audit"}} {
		code, stdout, stderr := runBinary(t, env, args...)
		require.Zero(t, code, stderr)
		check("inorder "+strings.Join(args, " "), stdout+stderr)
	}
	require.Contains(t, p.logs(), "[redacted]", "the sink's echo of the header is in the halt error, redacted")
	check("the logs of a halted processor", p.logs())

	// A database that cannot be reached: the retry lines name the server, not the password.
	away := strings.Replace(url, b.db.URL[strings.LastIndex(b.db.URL, "@")+1:strings.LastIndex(b.db.URL, "/")], "127.0.0.1:1", 1)
	down := startBinary(t, []string{"DATABASE_URL=" + away}, "run", "--process", "billing", "--table", "bookings")
	require.Eventually(t, func() bool { return strings.Contains(down.logs(), "database unreachable; retrying") },
		20*time.Second, 10*time.Millisecond, down.logs())
	check("the logs of a processor that cannot connect", down.logs())
}
