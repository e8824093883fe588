package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// TestARunConfiguredByTheEnvironmentDelivers runs `inorder run` with no flag at all, every setting from
// INORDER_* variables, and one flag on the command line that wins over its variable.
func TestARunConfiguredByTheEnvironmentDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	env := append(b.env, "INORDER_PROCESS=booking_sms", "INORDER_TABLE=nope", "INORDER_START_FROM=beginning",
		"INORDER_POLL_INTERVAL=20ms", "INORDER_COLUMNS=id,aggregate_id", "INORDER_LOG_LEVEL=warn")
	p := startBinary(t, env, "run", "--table", "bookings")
	require.Eventually(t, func() bool { return len(p.output()) == 3 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Equal(t, `{"process":"booking_sms","record":{"id":1,"aggregate_id":"customer-1"}}`, p.output()[0])
	require.NotContains(t, p.logs(), "cursor locked", "INORDER_LOG_LEVEL=warn was read: no info lines")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
}

// TestAnEnvironmentValueAFlagRefusesIsOneLine names the variable, not its value.
func TestAnEnvironmentValueAFlagRefusesIsOneLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, stdout, stderr := runBinary(t, append(b.env, "INORDER_BATCH_SIZE=s3cret"), runArgs()...)
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "INORDER_BATCH_SIZE (for --batch-size) holds a value the flag refuses")
	require.NotContains(t, stderr, "s3cret")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)

	code, _, stderr = runBinary(t, nil, "run", "--help")
	require.Zero(t, code)
	require.Contains(t, stderr, "INORDER_<FLAG>")
}

// TestVersionSaysWhatWasBuilt prints the version line for both spellings.
func TestVersionSaysWhatWasBuilt(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runBinary(t, nil, args...)
		require.Zero(t, code, stderr)
		require.True(t, strings.HasPrefix(stdout, "inorder "), stdout)
		require.Contains(t, stdout, " go1.")
	}
}

// TestACommandBeforeMigrateSaysToMigrate runs status and run against a database without inorder's
// tables: one line that says to run inorder migrate.
func TestACommandBeforeMigrateSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	db.Exec(t, `CREATE TABLE bookings (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id)`)
	env := []string{"DATABASE_URL=" + db.URL}
	for _, args := range [][]string{{"status"}, runArgs()} {
		code, _, stderr := runBinary(t, env, args...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "run inorder migrate first", "%v", args)
	}
}
