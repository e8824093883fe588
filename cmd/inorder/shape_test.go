package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunLivesThroughMigrationsOfItsTable migrates the table of `inorder run` with the default columns:
// a column added appears in the lines printed after it, a column dropped leaves them, and the process
// neither exits nor loses a row. Then a run that names its columns meets the rename of one: it waits,
// status says `source changed` and what to do, and it goes on once the column is renamed back.
func TestRunLivesThroughMigrationsOfItsTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 3, "1")
	p := startBinary(t, b.env, runArgs()...)
	lines := func(n int) []string {
		t.Helper()
		require.Eventually(t, func() bool { return len(p.output()) >= n }, 20*time.Second, 5*time.Millisecond, p.logs())
		return p.output()
	}
	lines(3)
	insert := func(n int, amount string) {
		b.db.Exec(t, fmt.Sprintf("INSERT INTO bookings (aggregate_id, %s) SELECT 'customer-1', 1 FROM generate_series(1, %d)", amount, n))
	}
	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE bookings ADD COLUMN tenant text NOT NULL DEFAULT 'acme'")
	insert(2, "amount")
	require.Contains(t, lines(5)[4], `"tenant":"acme"`)
	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE bookings DROP COLUMN details")
	insert(2, "amount")
	last := lines(7)[6]
	require.NotContains(t, last, `"details"`)
	require.Contains(t, last, `"id":7,`)
	for i, l := range p.output() {
		require.Contains(t, l, fmt.Sprintf(`"id":%d,`, i+1), "every row once, in order")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	named := startBinary(t, b.env, append(runArgs("--columns", "id,aggregate_id,amount,created_at"), "--process", "named")...)
	require.Eventually(t, func() bool { return len(named.output()) == 7 }, 20*time.Second, 5*time.Millisecond, named.logs())
	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE bookings RENAME COLUMN amount TO total")
	insert(1, "total")
	var rep statusDoc
	require.Eventually(t, func() bool {
		code, stdout, _ := runBinary(t, b.env, "status", "--json", "--process", "named")
		return code == 0 && json.Unmarshal([]byte(stdout), &rep) == nil && len(rep.Processes) == 1 &&
			rep.Processes[0].State == "source changed"
	}, 20*time.Second, 20*time.Millisecond, named.logs())
	require.NotNil(t, rep.Processes[0].SourceWait)
	require.Contains(t, *rep.Processes[0].SourceWait, `column public.bookings.amount, a column the process selects (Source.Columns, --columns), is gone`)
	require.Contains(t, *rep.Processes[0].SourceWait, `ALTER TABLE "public"."bookings" RENAME COLUMN "total" TO "amount"`)
	_, text, _ := runBinary(t, b.env, "status", "--process", "named")
	require.Contains(t, text, "named waits for its source table to fit again")
	require.Contains(t, strings.Join(strings.Fields(text), " "), `RENAME COLUMN "total" TO "amount"`)
	require.Len(t, named.output(), 7, "nothing read while the column is gone")

	b.db.Exec(t, "SET lock_timeout = '2s'; ALTER TABLE bookings RENAME COLUMN total TO amount")
	require.Eventually(t, func() bool { return len(named.output()) == 8 }, 20*time.Second, 5*time.Millisecond, named.logs())
	require.Contains(t, named.output()[7], `"id":8,`)
	require.NoError(t, named.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, named.wait(t), named.logs())
}
