package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestTheCLIThroughATransactionPooler: inorder run, status, pause, resume and audit through PgBouncer in
// transaction mode with its default configuration and a URL that asks for no prepared statements; and,
// with a URL that does not, one line saying what to add to it.
func TestTheCLIThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	bouncer := pgtest.Bouncer(t, b.db, pgbouncer.Transaction, map[string]string{"default_pool_size": "1"})
	env := []string{"DATABASE_URL=" + bouncer.URL(b.db.Name, "default_query_exec_mode=exec")}

	p := startBinary(t, env, runArgs("--instance", "pooled")...)
	require.Eventually(t, func() bool { return len(p.output()) == 3 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Contains(t, p.logs(), `"pool_mode":"transaction"`)
	var rep statusDoc
	require.Eventually(t, func() bool {
		code, stdout, _ := runBinary(t, env, "status", "--json")
		return code == 0 && json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 &&
			rep.Processes[0].Behind != nil && rep.Processes[0].Behind.Rows == 0
	}, 20*time.Second, 20*time.Millisecond, p.logs())
	ps := rep.Processes[0]
	require.True(t, ps.Locked)
	require.Equal(t, "pooled", ps.Holder)
	require.NotNil(t, ps.LeaseExpiresAt)
	for _, action := range []string{"pause", "resume"} {
		code, _, stderr := runBinary(t, env, action, "--process", "booking_sms", "--reason", "maintenance")
		require.Zero(t, code, stderr)
	}
	code, stdout, stderr := runBinary(t, env, "audit", "--json")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, `"action": "resume"`)
	b.book(t, 2, "1")
	require.Eventually(t, func() bool { return len(p.output()) == 5 }, 20*time.Second, 5*time.Millisecond, p.logs())

	// pgx's default statement cache, beside another client of the one server connection that prepared
	// the same statement (status's own first statement) first.
	plain := []string{"DATABASE_URL=" + bouncer.URL(b.db.Name, "")}
	var lines []string
	for range 2 {
		code, _, stderr = runBinary(t, plain, "status")
		if code != 0 {
			lines = strings.Split(strings.TrimSpace(stderr), "\n")
			break
		}
	}
	require.Len(t, lines, 1, "one line")
	require.Contains(t, lines[0], "add default_query_exec_mode=exec to the database URL")
}
