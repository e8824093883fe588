package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestARotatedPasswordIsReadAgainWithoutARestart runs a process whose password is in a passfile (libpq's,
// named in the URL) or in --database-password-file (INORDER_DATABASE_PASSWORD_FILE, a mounted Secret),
// and rotates it while rows are written. Rotated the usual way (the file rewritten, the role's password
// changed, its sessions ended), the process goes on within 10s. Rotated the other way round (the password
// changed and the sessions ended before the file is rewritten), /readyz and inorder_credentials_refused say
// that the database refused the credentials, naming the user and the server, until the file is rewritten;
// then it goes on within 10s. It never exits, and every row arrives once, in order.
func TestARotatedPasswordIsReadAgainWithoutARestart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"passfile", "password file"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			role, url := pgtest.PasswordRole(t, b.db, "first")
			dir := t.TempDir()
			file := filepath.Join(dir, "secret")
			line := func(password string) string { return password + "\n" }
			env := []string{"DATABASE_URL=" + url, "INORDER_DATABASE_PASSWORD_FILE=" + file}
			if how == "passfile" {
				line = func(password string) string { return "*:*:*:" + role + ":" + password + "\n" }
				env = []string{"DATABASE_URL=" + url + "&passfile=" + file}
			}
			write := func(password string) { // at once, as a Secret's volume is updated
				tmp := filepath.Join(dir, "next")
				require.NoError(t, os.WriteFile(tmp, []byte(line(password)), 0o600))
				require.NoError(t, os.Rename(tmp, file))
			}
			rotate := func(password string) int {
				b.db.Exec(t, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" PASSWORD '"+password+"'")
				var ended int
				require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid))
					FROM pg_stat_activity WHERE usename = $1`, role).Scan(&ended))
				require.NotZero(t, ended, "the process had sessions")
				return ended
			}
			write("first")
			b.book(t, 10, "1")
			p := startBinary(t, env, runArgs("--columns", "id", "--metrics-addr", "127.0.0.1:0")...)
			addr := metricsAddr(t, p)
			get := func(path string) (int, string) {
				resp, err := http.Get("http://" + addr + path)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(body)
			}
			ids := func() []int64 {
				var ids []int64
				for _, l := range p.output() {
					var rec struct {
						Record struct{ ID int64 } `json:"record"`
					}
					require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
					ids = append(ids, rec.Record.ID)
				}
				return ids
			}
			delivered := func(n int) func() bool { // n records, each counted once
				return func() bool {
					seen := map[int64]bool{}
					for _, id := range ids() {
						seen[id] = true
					}
					return len(seen) >= n
				}
			}
			require.Eventually(t, delivered(10), 20*time.Second, 5*time.Millisecond, p.logs())

			// The usual way: the file first.
			write("second")
			ended := rotate("second")
			b.book(t, 10, "1")
			require.Eventually(t, delivered(20), 10*time.Second, 5*time.Millisecond, p.logs())

			// The other way round: refused until the file is rewritten.
			ended += rotate("third")
			b.book(t, 10, "1")
			cc, err := pgx.ParseConfig(url)
			require.NoError(t, err)
			refusal := "the database refused the credentials of user " + role + " on " +
				net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
			require.Eventually(t, func() bool {
				code, body := get("/readyz")
				return code == http.StatusServiceUnavailable && strings.Contains(body, "process booking_sms: reconnecting: "+refusal)
			}, 20*time.Second, 5*time.Millisecond, p.logs())
			// Alive all the same: the chart's liveness probe (/healthz) keeps the pod, only unready, and the
			// process does not exit, so systemd has nothing to restart.
			code, _ := get("/healthz")
			require.Equal(t, http.StatusOK, code, "a refusal of the credentials is an outage, not a death")
			_, metrics := get("/metrics")
			require.Contains(t, metrics, `inorder_credentials_refused{process="booking_sms"} 1`)
			require.Contains(t, p.logs(), refusal)
			write("third")
			fixed := time.Now()
			require.Eventually(t, delivered(30), 10*time.Second, 5*time.Millisecond, p.logs())
			t.Logf("delivering again %s after the file was rewritten", time.Since(fixed).Round(time.Millisecond))
			require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 10*time.Second,
				5*time.Millisecond, p.logs())
			_, metrics = get("/metrics")
			require.Contains(t, metrics, `inorder_credentials_refused{process="booking_sms"} 0`)

			select {
			case <-p.done:
				t.Fatalf("inorder exited; logs:\n%s", p.logs())
			default:
			}
			got := ids()
			var once []int64
			for _, id := range got {
				if len(once) > 0 && id <= once[len(once)-1] {
					require.Equal(t, once[len(once)-1], id, "only the record in flight at a lost session comes again: %v", got)
					continue
				}
				once = append(once, id)
			}
			require.Len(t, once, 30, "%v", got)
			require.Equal(t, int64(1), once[0])
			require.Equal(t, int64(30), once[29], "every row once, in order")
			require.LessOrEqual(t, len(got)-len(once), ended)
		})
	}
}

// TestAnEmptyPasswordFileStopsTheStart: --database-password-file naming a file that is missing or empty is
// a mistake of the start, said in one line naming the flag, with no password printed.
func TestAnEmptyPasswordFileStopsTheStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for _, file := range []string{empty, filepath.Join(t.TempDir(), "missing")} {
		code, stdout, stderr := runBinary(t, b.env, append(runArgs(), "--database-password-file", file)...)
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "inorder run: --database-password-file: ")
		require.Contains(t, stderr, file)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	}
}
