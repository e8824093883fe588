package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func statusOf(t *testing.T, b *bundle) processDoc {
	t.Helper()
	ps, err := tryStatus(t, b)
	require.NoError(t, err)
	return ps
}

// tryStatus is statusOf for polling: a process that has not registered itself yet is an error to wait out,
// not a failure.
func tryStatus(t *testing.T, b *bundle) (processDoc, error) {
	t.Helper()
	code, stdout, stderr := runBinary(t, b.env, "status", "--json", "--process", "booking_sms")
	if code != 0 {
		return processDoc{}, fmt.Errorf("status exited %d: %s", code, stderr)
	}
	var rep statusDoc
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		return processDoc{}, err
	}
	if len(rep.Processes) != 1 {
		return processDoc{}, fmt.Errorf("%d processes in %s", len(rep.Processes), stdout)
	}
	return rep.Processes[0], nil
}

func deliveredIDs(p *proc) []string {
	var ids []string
	for _, l := range p.output() {
		var line struct {
			Record struct {
				ID json.Number `json:"id"`
			} `json:"record"`
		}
		if json.Unmarshal([]byte(l), &line) == nil {
			ids = append(ids, line.Record.ID.String())
		}
	}
	return ids
}

// TestOperatorActionsOnARunningProcessor halts a stream on a poison record and drives the operator
// commands against the running processor: skip of another record is refused, skip of the halted one moves
// past exactly it with an audit row, rewind delivers again in order, pause stops and resume continues.
func TestOperatorActionsOnARunningProcessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 2, "1")
	b.book(t, 1, "'NaN'") // record 3 cannot be encoded: a poison record
	b.book(t, 2, "1")
	p := startBinary(t, b.env, runArgs()...)
	require.Eventually(t, func() bool {
		ps, err := tryStatus(t, b)
		return err == nil && ps.Halt != nil && ps.Halt.RecordID == "3"
	}, 20*time.Second, 20*time.Millisecond, p.logs())

	code, _, stderr := runBinary(t, b.env, "skip", "--process", "booking_sms", "--record", "4", "--reason", "wrong one", "--actor", "ops")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "the stream is halted on another record (3)")
	code, _, stderr = runBinary(t, b.env, "skip", "--process", "booking_sms", "--record", "3", "--actor", "ops")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--reason is required")

	code, stdout, stderr := runBinary(t, b.env, "skip", "--process", "booking_sms", "--record", "3",
		"--reason", "amount NaN, refunded by hand", "--actor", "alice")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "skip on booking_sms by alice")
	require.Eventually(t, func() bool { return len(p.output()) == 4 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Equal(t, []string{"1", "2", "4", "5"}, deliveredIDs(p), "exactly record 3 was skipped")
	// The log line comes before the record, but through another pipe.
	require.Eventually(t, func() bool { return strings.Contains(p.logs(), "position moved by an operator") },
		20*time.Second, 5*time.Millisecond, p.logs())

	code, _, _ = runBinary(t, b.env, "skip", "--process", "booking_sms", "--record", "3", "--reason", "again", "--actor", "alice")
	require.Equal(t, 1, code, "skip refused while the stream is not halted")

	// Rewind to record 2: 2, 4 and 5 are delivered again, in order (3 is still unencodable, so the
	// stream halts on it again: a rewind replays, it does not remember skips).
	code, _, stderr = runBinary(t, b.env, "rewind", "--process", "booking_sms", "--to-record", "4", "--actor", "alice", "--reason", "replay")
	require.Zero(t, code, stderr)
	require.Eventually(t, func() bool { return len(p.output()) == 6 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Equal(t, []string{"1", "2", "4", "5", "4", "5"}, deliveredIDs(p))
	code, _, stderr = runBinary(t, b.env, "rewind", "--process", "booking_sms", "--to-time", "2999-01-01T00:00:00Z", "--actor", "alice")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "rewind only moves back")

	// Pause: the processor says so, and new rows wait; resume: they arrive.
	code, _, stderr = runBinary(t, b.env, "pause", "--process", "booking_sms", "--actor", "alice", "--reason", "maintenance")
	require.Zero(t, code, stderr)
	require.Eventually(t, func() bool { return strings.Contains(p.logs(), "paused by an operator") }, 20*time.Second, 5*time.Millisecond)
	b.book(t, 2, "1")
	time.Sleep(200 * time.Millisecond) // ten poll intervals: nothing may arrive while paused
	require.Len(t, p.output(), 6, "nothing delivered while paused")
	ps := statusOf(t, b)
	require.Equal(t, "paused", ps.State)
	require.Equal(t, int64(2), ps.Behind.Rows)
	code, _, stderr = runBinary(t, b.env, "resume", "--process", "booking_sms", "--actor", "alice")
	require.Zero(t, code, stderr)
	require.Eventually(t, func() bool { return len(p.output()) == 8 }, 20*time.Second, 5*time.Millisecond, p.logs())
	require.Equal(t, []string{"6", "7"}, deliveredIDs(p)[6:])

	code, stdout, stderr = runBinary(t, b.env, "audit", "--json", "--process", "booking_sms")
	require.Zero(t, code, stderr)
	var audit struct {
		Entries []struct {
			Action, Actor, Reason string
			RecordID              string `json:"record_id"`
			Role                  string `json:"db_role"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &audit))
	var got []string
	for _, e := range audit.Entries {
		require.Equal(t, "postgres", e.Role)
		got = append(got, fmt.Sprintf("%s %s %s %q", e.Action, e.Actor, e.RecordID, e.Reason))
	}
	require.Equal(t, []string{
		`resume alice  ""`,
		`pause alice  "maintenance"`,
		`rewind alice 4 "replay"`,
		`skip alice 3 "amount NaN, refunded by hand"`,
	}, got, "every action audited, newest first; refused ones not")
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inorder.audit").Scan(&n))
	require.Equal(t, 4, n)

	// The table shows who acted in full, a name with its origin included.
	code, _, stderr = runBinary(t, b.env, "pause", "--process", "booking_sms", "--actor", "ada lovelace (console)")
	require.Zero(t, code, stderr)
	code, stdout, stderr = runBinary(t, b.env, "audit", "--process", "booking_sms")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "ada lovelace (console)/postgres")
}
