package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestAWrongPasswordSaysSoInOneLine connects as a role that must give a password (a rule of its own at the
// top of the cluster's pg_hba.conf), with the wrong one: status and run say in one line that the password
// failed and on which server, and not the TLS attempt before it (sslmode=prefer asks a server without TLS
// for it first); the console's page says the same.
func TestAWrongPasswordSaysSoInOneLine(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	role, _ := pgtest.PasswordRole(t, db, "right")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	url := "postgres://" + role + ":wrong@" + cc.Host + ":" + strconv.Itoa(int(cc.Port)) + "/" + cc.Database
	server := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	for _, args := range [][]string{{"status"}, runArgs()} {
		code, stdout, stderr := runBinary(t, []string{"DATABASE_URL=" + url}, args...)
		require.Equal(t, 1, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "failed to connect to `user="+role+" database="+cc.Database+"` on "+server+": ")
		require.Contains(t, stderr, `password authentication failed for user "`+role+`"`)
		require.NotContains(t, stderr, "tls error")
		require.NotContains(t, stderr, "wrong", "the password is not printed")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	}

	p := startBinary(t, []string{"DATABASE_URL=" + url}, "console", "--addr", "127.0.0.1:0")
	var addr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(p.logs(), "\n") {
			var e struct{ Addr, Message string }
			if json.Unmarshal([]byte(l), &e) == nil && e.Message == "serving the console" {
				addr = e.Addr
			}
		}
		return addr != ""
	}, 20*time.Second, 10*time.Millisecond, "the console starts; logs:\n%s", p.logs())
	resp, err := http.Get("http://" + addr + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Contains(t, string(body), "on "+server+": ")
	require.Contains(t, string(body), `password authentication failed for user "`+role+`"`)
	require.NotContains(t, string(body), "tls error")
	require.NotContains(t, p.logs(), "tls error")
}
