package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRoutesInAConfigFileEachKeepTheirRows: two processes over one table, each with its filter (where:),
// in one configuration file: each delivers exactly the rows its filter keeps, in order; status shows each
// filter. A process started again with another filter, or a bad one, refuses to start in one line.
func TestRoutesInAConfigFileEachKeepTheirRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 9, "1") // customer-1, -2, -0, -1, ...: ids 1, 4, 7 are customer-1's
	path := writeConfig(t, `
start-from: beginning
poll-interval: 20ms
table: bookings
columns: [id, aggregate_id]
processes:
  - process: vip
    where: aggregate_id = 'customer-1'
  - process: others
    where: aggregate_id <> 'customer-1'
`)
	p := startBinary(t, b.env, "run", "--config", path)
	require.Eventually(t, func() bool { return len(p.output()) == 9 }, 20*time.Second, 5*time.Millisecond, p.logs())
	got := map[string][]int64{}
	for _, l := range p.output() {
		var line struct {
			Process string
			Record  struct{ ID int64 }
		}
		require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		got[line.Process] = append(got[line.Process], line.Record.ID)
	}
	require.Equal(t, map[string][]int64{"vip": {1, 4, 7}, "others": {2, 3, 5, 6, 8, 9}}, got)

	code, stdout, stderr := runBinary(t, b.env, "status", "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Processes []struct {
			Process string
			Source  struct{ Where string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	wheres := map[string]string{}
	for _, ps := range rep.Processes {
		wheres[ps.Process] = ps.Source.Where
	}
	require.Equal(t, map[string]string{"vip": "aggregate_id = 'customer-1'", "others": "aggregate_id <> 'customer-1'"}, wheres)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	for _, tc := range []struct{ where, says string }{
		{"aggregate_id = 'customer-2'", `taken with the filter "aggregate_id = 'customer-1'"`},
		{"amount > 'x'", "invalid input syntax"},
		{"true; DROP TABLE bookings", "statement separator"},
	} {
		code, _, stderr := runBinary(t, b.env, "run", "--process", "vip", "--table", "bookings", "--where", tc.where)
		require.NotZero(t, code)
		require.Contains(t, stderr, tc.says)
		var errLines []string
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if strings.Contains(l, tc.says) {
				errLines = append(errLines, l)
			}
		}
		require.Len(t, errLines, 1, stderr)
	}
}
