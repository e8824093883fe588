package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPruneAndForgetHelpAndBadInput: each command has its help, and bad input gets one line naming the
// flag and exit code 2, before any database is touched.
func TestPruneAndForgetHelpAndBadInput(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBinary(t, nil, "prune", "--help")
	require.Zero(t, code)
	for _, flag := range []string{"-table", "-older-than", "-before", "-dry-run", "-batch", "-actor", "-json"} {
		require.Contains(t, stderr, flag)
	}
	code, _, stderr = runBinary(t, nil, "forget", "--help")
	require.Zero(t, code)
	require.Contains(t, stderr, "-process")
	code, _, stderr = runBinary(t, nil, "--help")
	require.Zero(t, code)
	require.Contains(t, stderr, "inorder prune [flags]")
	require.Contains(t, stderr, "inorder forget [flags]")

	env := []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none"} // never reached
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"prune", "--older-than", "30d"}, "inorder prune: --table is required"},
		{[]string{"prune", "--table", "bookings"}, "inorder prune: give exactly one of --older-than and --before"},
		{[]string{"prune", "--table", "bookings", "--older-than", "1h", "--before", "2024-01-01T00:00:00Z"},
			"inorder prune: give exactly one of --older-than and --before"},
		{[]string{"prune", "--table", "bookings", "--older-than", "soon"}, `inorder prune: --older-than "soon" is not a positive duration`},
		{[]string{"prune", "--table", "bookings", "--older-than", "-1h"}, `inorder prune: --older-than "-1h" is not a positive duration`},
		{[]string{"prune", "--table", "bookings", "--before", "yesterday"}, `inorder prune: --before "yesterday" is not an RFC 3339 time`},
		{[]string{"prune", "--table", "bookings", "--older-than", "1h", "--batch", "0"}, "inorder prune: --batch must be at least 1"},
		{[]string{"prune", "--table", "bookings", "--older-than", "1h", "--actor", ""}, "inorder prune: --actor is required"},
		{[]string{"prune", "--table", "bookings", "--older-than", "1h", "stray"}, `inorder prune: unexpected argument "stray"`},
		{[]string{"forget"}, "inorder forget: --process is required"},
		{[]string{"forget", "--process", "p", "--actor", ""}, "inorder forget: --actor is required"},
	} {
		code, stdout, stderr := runBinary(t, env, c.args...)
		require.Equal(t, 2, code, "%q: %s", c.args, stderr)
		require.Empty(t, stdout)
		require.True(t, strings.HasPrefix(stderr, c.msg), "%q: %q", c.args, stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

type pruneJSON struct {
	Table   string    `json:"table"`
	Cut     time.Time `json:"cut"`
	DryRun  bool      `json:"dry_run"`
	Rows    int64     `json:"rows"`
	Through *struct {
		ID string `json:"id"`
	} `json:"through"`
	Passed struct {
		ID string `json:"id"`
	} `json:"passed"`
	LimitedBy *struct {
		Process, Note string
	} `json:"limited_by"`
	Processes []struct {
		Process, Stream, Note string
	} `json:"processes"`
	Entries []struct {
		Action string
		Detail struct {
			Rows int64
		}
	} `json:"audit_entries"`
}

// TestPruneAndForgetAgainstARunningProcessor drives both commands against the real binary: refusals
// are one line with exit code 1, a dry run deletes nothing, a prune deletes what the process passed and
// is audited, forget is refused while the processor runs and, once it stopped, makes the process start
// afresh when run again.
func TestPruneAndForgetAgainstARunningProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.book(t, 15, "1")
	refused := func(args []string, msg string) {
		t.Helper()
		code, stdout, stderr := runBinary(t, b.env, args...)
		require.Equal(t, 1, code, "%q: %s", args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, msg)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
	refused([]string{"prune", "--table", "bookings", "--older-than", "1s"}, "no process reads the table")
	refused([]string{"prune", "--table", "nosuch", "--older-than", "1s"}, `table "nosuch" does not exist`)
	refused([]string{"forget", "--process", "nobody"}, `no process named "nobody"`)

	p := startBinary(t, b.env, runArgs()...)
	require.Eventually(t, func() bool { return b.position(t) == "15" }, 20*time.Second, 10*time.Millisecond, p.logs())
	refused([]string{"forget", "--process", "booking_sms", "--actor", "alice", "--wait", "1s"}, "stop every instance first")

	// The database's clock decides --older-than: nothing is a day old.
	code, stdout, stderr := runBinary(t, b.env, "prune", "--table", "bookings", "--older-than", "1d", "--dry-run", "--json")
	require.Zero(t, code, stderr)
	var rep pruneJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	var dbNow time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(-24*time.Hour), rep.Cut, time.Minute)
	require.Zero(t, rep.Rows)
	require.Nil(t, rep.Through)
	require.True(t, rep.DryRun)
	require.Nil(t, rep.LimitedBy, "the process has passed the cut-off")

	var before time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT created_at FROM bookings WHERE id = 8").Scan(&before))
	cut := before.UTC().Format(time.RFC3339Nano)
	code, stdout, stderr = runBinary(t, b.env, "prune", "--table", "bookings", "--before", cut, "--dry-run")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "inorder: dry run: would prune 7 rows of public.bookings created before "+cut)
	require.Contains(t, stdout, "nothing deleted")
	require.Contains(t, stdout, "every process of public.bookings has passed the cut-off")
	require.Contains(t, stdout, "PROCESS")
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM bookings").Scan(&n))
	require.Equal(t, 15, n, "a dry run deletes nothing")

	code, stdout, stderr = runBinary(t, b.env, "prune", "--table", "bookings", "--before", cut, "--batch", "4",
		"--actor", "alice", "--reason", "keep a week", "--json")
	require.Zero(t, code, stderr)
	rep = pruneJSON{}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Equal(t, int64(7), rep.Rows)
	require.Equal(t, "7", rep.Through.ID)
	require.Equal(t, "15", rep.Passed.ID)
	require.Len(t, rep.Processes, 1)
	require.Equal(t, "booking_sms", rep.Processes[0].Process)
	require.Len(t, rep.Entries, 1)
	require.Equal(t, int64(7), rep.Entries[0].Detail.Rows)
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM bookings").Scan(&n))
	require.Equal(t, 8, n)

	b.book(t, 1, "1")
	require.Eventually(t, func() bool { return b.position(t) == "16" }, 20*time.Second, 10*time.Millisecond, p.logs())
	code, stdout, stderr = runBinary(t, b.env, "prune", "--table", "bookings", "--before", "2999-01-01T00:00:00Z", "--dry-run")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "inorder: dry run: would prune 9 rows of public.bookings created before 2999-01-01T00:00:00Z, through ")
	require.Contains(t, stdout, "/16; booking_sms holds the prune there\n")
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT created_at FROM bookings WHERE id = 12").Scan(&before))
	cut = before.UTC().Format(time.RFC3339Nano)
	code, stdout, stderr = runBinary(t, b.env, "prune", "--table", "bookings", "--before", cut, "--actor", "alice", "--batch", "3")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "inorder: prune on booking_sms by alice (role postgres)")
	require.Contains(t, stdout, "inorder: pruned 4 rows of public.bookings created before "+cut+", through ")
	require.Contains(t, stdout, "/11, in 2 batches\n")
	require.Contains(t, stdout, "every process of public.bookings has passed the cut-off")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())
	require.Eventually(t, func() bool {
		var sessions int
		err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name LIKE 'inorder%' AND datname = current_database()`).Scan(&sessions)
		return err == nil && sessions == 0
	}, 20*time.Second, 10*time.Millisecond, "the stopped instance's session to end")
	code, stdout, stderr = runBinary(t, b.env, "forget", "--process", "booking_sms", "--actor", "alice", "--reason", "rebuilt")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "inorder: forget on booking_sms by alice")
	require.Contains(t, stdout, "inorder: forgot booking_sms (its cursor row, at ")

	code, stdout, stderr = runBinary(t, b.env, "audit", "--process", "booking_sms")
	require.Zero(t, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4)
	require.Contains(t, lines[0], "DETAIL")
	require.Contains(t, lines[1], "forget")
	require.Contains(t, lines[1], "its cursor row removed")
	require.Contains(t, lines[2], "prune")
	require.Contains(t, lines[2], "4 rows of public.bookings created before")
	require.Contains(t, lines[3], "7 rows of public.bookings")

	// Run again, the process starts afresh: from the oldest row left, not from where it stood.
	again := startBinary(t, b.env, runArgs()...)
	require.Eventually(t, func() bool { return len(again.output()) == 5 }, 20*time.Second, 10*time.Millisecond, again.logs())
	require.Equal(t, []string{"12", "13", "14", "15", "16"}, deliveredIDs(again))
}

// TestPruneNamesNoProcessWhenSeveralStandTogether: when the processes furthest back stand at the same
// place, the prune stops there without blaming one of them.
func TestPruneNamesNoProcessWhenSeveralStandTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 4, "1")
	for _, name := range []string{"billing", "sms"} {
		p := startBinary(t, b.env, "run", "--process", name, "--table", "bookings", "--start-from", "beginning",
			"--poll-interval", "20ms")
		require.Eventually(t, func() bool { return len(p.output()) == 4 }, 20*time.Second, 10*time.Millisecond, p.logs())
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Zero(t, p.wait(t), p.logs())
	}
	code, stdout, stderr := runBinary(t, b.env, "prune", "--table", "bookings", "--before", "2999-01-01T00:00:00Z", "--dry-run")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "the processes of public.bookings furthest back stand together at ")
	require.NotContains(t, stdout, "holds the prune there")
}
