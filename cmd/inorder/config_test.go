package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// writeConfig writes a configuration file for the test and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inorder.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestOneConfigFileRunsSeveralProcesses runs two processes on two tables from one file in one OS process:
// the database URL from the environment through ${VAR}, the start and the poll interval from the top
// level, each table and its columns from its entry; each process delivers its own table, in order.
func TestOneConfigFileRunsSeveralProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE TABLE refunds (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON refunds (created_at, id); INSERT INTO refunds SELECT FROM generate_series(1, 2)`)
	pgtest.AddClock(t, b.db, "refunds")
	b.book(t, 3, "1")
	path := writeConfig(t, `
database-url: ${APP_DATABASE_URL}
start-from: beginning
poll-interval: 20ms
processes:
  - process: booking_sms
    table: bookings
    columns: [id, aggregate_id]
  - process: refund_mail
    table: refunds
`)
	env := []string{"APP_DATABASE_URL=" + strings.TrimPrefix(b.env[0], "DATABASE_URL=")}
	p := startBinary(t, env, "run", "--config", path)
	require.Eventually(t, func() bool { return len(p.output()) == 5 }, 20*time.Second, 5*time.Millisecond, p.logs())
	got := map[string][]int64{}
	for _, l := range p.output() {
		var line struct {
			Process string
			Record  struct{ ID int64 }
		}
		require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		got[line.Process] = append(got[line.Process], line.Record.ID)
	}
	require.Equal(t, map[string][]int64{"booking_sms": {1, 2, 3}, "refund_mail": {1, 2}}, got)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
}

// TestAConfigFileMistakeIsOneLineWithItsLine refuses, before anything runs, a key that is no flag (with
// the one meant), a value its flag refuses, a ${VAR} that is not set and a process without its table,
// each naming the key and its line.
func TestAConfigFileMistakeIsOneLineWithItsLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ name, text, want string }{
		{"a typo", "start-from: beginning\nprocesses:\n  - process: a\n    table: bookings\n    webhok-url: http://x\n",
			`line 5: unknown key "webhok-url"; did you mean webhook-url?`},
		{"a wrong type", "batch-size: many\nprocesses:\n  - process: a\n    table: bookings\n",
			"line 1: batch-size: invalid value"},
		{"an unset variable", "database-url: ${NO_SUCH_VARIABLE_HERE}\nprocesses:\n  - process: a\n    table: bookings\n",
			"line 1: database-url: the environment variable NO_SUCH_VARIABLE_HERE is not set"},
		{"a missing table", "start-from: beginning\nprocesses:\n  - process: a\n    table: bookings\n  - process: b\n",
			"process #2 (line 5): --table is required"},
		{"metrics in an entry", "processes:\n  - process: a\n    metrics-addr: :9090\n",
			"line 3: metrics-addr is for the whole file: set it at the top level"},
		{"one name twice", "table: bookings\nprocesses:\n  - process: a\n  - process: a\n",
			`line 4: process "a" is also the process of the entry at line 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, b.env, "run", "--config", writeConfig(t, tc.text))
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
	require.Empty(t, b.position(t), "nothing ran")
}

// TestAnEmptyDatabaseURLIsBlamedOnTheEnvironment: DATABASE_URL set but empty (a secret not mounted) is
// the fault of the line of the file that reads it, or of the environment when no line does, and never of
// the first process, which only happens to need a database first.
func TestAnEmptyDatabaseURLIsBlamedOnTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, text, want string }{
		{"read by the file", "database-url: ${DATABASE_URL}\nstart-from: beginning\nprocesses:\n  - process: a\n    table: bookings\n",
			"line 1: database-url: the environment variable DATABASE_URL is empty"},
		{"not in the file", "start-from: beginning\nprocesses:\n  - process: a\n    table: bookings\n",
			"no database: DATABASE_URL is empty or unset, and --config "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runBinary(t, []string{"DATABASE_URL="}, "run", "--config", writeConfig(t, tc.text))
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "process #1")
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
}

// TestOneProcessSettingsAreNotSetForAWholeFile: in a file of several processes, INORDER_TABLE or --table
// (and the process's name likewise) would make every process read one table: refused in one line naming
// the variable or flag, before anything runs; a file of one process takes it as before.
func TestOneProcessSettingsAreNotSetForAWholeFile(t *testing.T) {
	t.Parallel()
	two := "database-url: postgres://nowhere.invalid/db\nstart-from: beginning\nprocesses:\n" +
		"  - process: a\n    table: bookings\n  - process: b\n    table: refunds\n"
	for _, tc := range []struct {
		name      string
		env, args []string
		want      string
	}{
		{"the environment's table", []string{"INORDER_TABLE=nosuch"}, nil, "INORDER_TABLE would set the table of every process"},
		{"the environment's process", []string{"INORDER_PROCESS=x"}, nil, "INORDER_PROCESS would set the process of every process"},
		{"the command line's table", nil, []string{"--table", "nosuch"}, "--table would set the table of every process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "--config", writeConfig(t, two)}, tc.args...)
			code, stdout, stderr := runBounded(t, tc.env, args...) // unrefused, it would keep trying to connect
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "(2 processes): set it in each process's entry")
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
}
