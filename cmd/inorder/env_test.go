package main

import (
	"runtime/debug"
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
		require.True(t, strings.HasPrefix(stdout, "inorder "+testVersion+" "), stdout)
		require.Contains(t, stdout, " go1.")
	}
}

// TestAnInstalledModuleSaysItsVersion: `go install github.com/inorder-dev/inorder/cmd/inorder@v0.1.0`
// stamps nothing with -X, but the toolchain records the module's version, which the binary then says; a
// version stamped at build time wins; a build that recorded neither says devel, with its commit.
func TestAnInstalledModuleSaysItsVersion(t *testing.T) {
	t.Parallel()
	installed, err := debug.ParseBuildInfo("path\tgithub.com/inorder-dev/inorder/cmd/inorder\n" +
		"mod\tgithub.com/inorder-dev/inorder\tv0.1.0\th1:x=\n")
	require.NoError(t, err)
	v, commit, _ := versionOf("", installed, true)
	require.Equal(t, "v0.1.0", v)
	require.Empty(t, commit)
	v, _, _ = versionOf("v0.1.0-3-gabc1234", installed, true)
	require.Equal(t, "v0.1.0-3-gabc1234", v, "make build's stamp wins")

	clone, err := debug.ParseBuildInfo("path\tgithub.com/inorder-dev/inorder/cmd/inorder\n" +
		"mod\tgithub.com/inorder-dev/inorder\t(devel)\t\nbuild\tvcs.revision=0123abcd\nbuild\tvcs.modified=true\n")
	require.NoError(t, err)
	v, commit, modified := versionOf("", clone, true)
	require.Equal(t, "devel", v)
	require.Equal(t, "0123abcd", commit)
	require.True(t, modified)
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
