package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
)

// TestStateOfAFailingRecord: a stream retrying a record says retrying, one halted on it (refused, or
// failing past its halt-after threshold) says halted; a pause says paused whatever else holds.
func TestStateOfAFailingRecord(t *testing.T) {
	t.Parallel()
	now := time.Now()
	behind := &behindJSON{Rows: 3}
	for _, tc := range []struct {
		name string
		in   cursor.Info
		want string
	}{
		{"retrying", cursor.Info{Connected: 1, State: cursor.State{Halt: &cursor.Halt{RecordID: "7"}}}, "retrying"},
		{"halted", cursor.Info{Connected: 1, State: cursor.State{Halt: &cursor.Halt{RecordID: "7", HaltedAt: now}}}, "halted"},
		{"halted and stopped", cursor.Info{State: cursor.State{Halt: &cursor.Halt{RecordID: "7", HaltedAt: now}}}, "halted"},
		{"paused while retrying", cursor.Info{Connected: 1, State: cursor.State{Paused: true, Halt: &cursor.Halt{}}}, "paused"},
		{"running", cursor.Info{Connected: 1}, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, stateOf(tc.in, behind))
		})
	}
}
