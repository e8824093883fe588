package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestANewProcessNeverStartsByItself: a mistyped process name beside the real one is refused rather than
// deliver the whole table again; the refusal names the process that reads the table and how far it is,
// nothing is delivered and no cursor row is left. The same name with --start-from now starts after the
// last row; a name in the form of a partition's is refused.
func TestANewProcessNeverStartsByItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.book(t, 3, "1")
	real := startBinary(t, b.env, "run", "--process", "order_payments", "--table", "bookings", "--start-from", "beginning",
		"--poll-interval", "20ms")
	require.Eventually(t, func() bool { return len(real.output()) == 3 }, 20*time.Second, 5*time.Millisecond, real.logs())
	require.NoError(t, real.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, real.wait(t), real.logs())

	code, stdout, stderr := runBinary(t, b.env, "run", "--process", "order payments", "--table", "bookings")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout, "nothing delivered")
	line := strings.TrimSpace(stderr)
	lines := strings.Split(line, "\n")
	line = lines[len(lines)-1]
	require.Contains(t, line, `process "order payments": a new process needs a start`)
	require.Contains(t, line, "--start-from beginning|now")
	require.NotContains(t, stderr, "Config.StartFrom", "a CLI user is told the flag, not the library's field")
	require.Contains(t, line, "processes that read it: order_payments (at ")
	require.Contains(t, line, "/3, 0 behind)")
	require.Contains(t, line, "did you mean order_payments?")
	var rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM inorder.cursor WHERE process_name = 'order payments'").Scan(&rows))
	require.Zero(t, rows, "no cursor row left")

	now := startBinary(t, b.env, "run", "--process", "order payments", "--table", "bookings", "--start-from", "now",
		"--poll-interval", "20ms")
	require.Eventually(t, func() bool { return strings.Contains(now.logs(), "cursor locked") }, 20*time.Second,
		5*time.Millisecond, now.logs())
	b.book(t, 2, "1")
	require.Eventually(t, func() bool { return len(now.output()) == 2 }, 20*time.Second, 5*time.Millisecond, now.logs())
	for i, l := range now.output() {
		require.Contains(t, l, `"id":`+[]string{"4", "5"}[i]+`,`, "only the rows after the start")
	}

	code, _, stderr = runBinary(t, b.env, "run", "--process", "order_payments#1/2", "--table", "bookings",
		"--start-from", "beginning")
	require.NotZero(t, code)
	require.Contains(t, stderr, "the name has the form of a partition's")
}

// TestAColumnTypoFailsAtStart: a handler's column that the table lacks stops the start, naming the
// table's columns, before any cursor row exists; it never halts a stream on a record an operator could
// then be tempted to skip.
func TestAColumnTypoFailsAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 2, "1")
	code, stdout, stderr := runBinary(t, b.env, "run", "--process", "billing", "--table", "bookings",
		"--start-from", "beginning", "--handler", "webhook", "--webhook-url", "http://127.0.0.1:1/hook",
		"--webhook-signature", "none", "--webhook-body-column", "detials")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	var plain []string // the lines that are not log lines
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.HasPrefix(l, "{") {
			plain = append(plain, l)
		}
	}
	require.Len(t, plain, 1, "one line of error: %s", stderr)
	require.Contains(t, plain[0], `the handler reads column "detials", which is not among the columns read from `+
		`public.bookings: id, aggregate_id, amount, details, created_at`)
	var rows int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inorder.cursor").Scan(&rows))
	require.Zero(t, rows, "no cursor row")
}

// TestAuditShowsTheWholeReason: an audit trail shows why in full, however long.
func TestAuditShowsTheWholeReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	p := startBinary(t, b.env, runArgs()...)
	require.Eventually(t, func() bool { return len(p.output()) == 1 }, 20*time.Second, 5*time.Millisecond, p.logs())
	const reason = "the billing provider asked us to hold every charge until their incident INC-4711 is resolved"
	code, _, stderr := runBinary(t, b.env, "pause", "--process", "booking_sms", "--reason", reason)
	require.Zero(t, code, stderr)
	code, stdout, stderr := runBinary(t, b.env, "audit")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, reason)
}
