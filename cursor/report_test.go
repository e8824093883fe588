package cursor_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
)

// TestStatusOf: the rules `inorder status` shows, decided in one place. A pause says paused whatever else
// holds; a stream retrying a record says retrying, one halted on it (refused, or failing past its
// halt-after threshold) says halted, whether an instance runs it or not, while a sink's outage or a retry
// with no instance running the process says not running (the row keeps what happened); rows behind separate running and held from idle, and without them a
// running instance counts as running unless List found it caught up.
func TestStatusOf(t *testing.T) {
	t.Parallel()
	now := time.Now()
	behind, none := &cursor.Lag{Rows: 3}, &cursor.Lag{}
	for _, tc := range []struct {
		name string
		in   cursor.Info
		lag  *cursor.Lag
		want cursor.StreamStatus
	}{
		{"retrying", cursor.Info{Connected: 1, State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7"}}}, behind, cursor.StatusRetrying},
		{"halted", cursor.Info{Connected: 1, State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", HaltedAt: now}}}, behind, cursor.StatusHalted},
		{"halted and stopped", cursor.Info{State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", HaltedAt: now}}}, nil, cursor.StatusHalted},
		{"sink unavailable", cursor.Info{Connected: 1, State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", Unavailable: "the URL"}}}, behind, cursor.StatusSinkUnavailable},
		{"sink unavailable, owner locked", cursor.Info{Locked: true, State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", Unavailable: "the URL"}}}, nil, cursor.StatusSinkUnavailable},
		{"sink unavailable when its only instance exited", cursor.Info{State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", Unavailable: "the URL"}}}, behind, cursor.StatusNotRunning},
		{"retrying when its only instance exited", cursor.Info{State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7"}}}, nil, cursor.StatusNotRunning},
		{"paused while retrying", cursor.Info{Connected: 1, State: inordertype.State{Paused: true, Halt: &inordertype.Halt{}}}, behind, cursor.StatusPaused},
		{"source changed", cursor.Info{Connected: 1, SourceWait: "column public.outbox.payload ... is gone"}, behind, cursor.StatusSourceChanged},
		{"source changed, a record failing says more", cursor.Info{Connected: 1, SourceWait: "column ...", State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7"}}}, behind, cursor.StatusRetrying},
		{"source changed when its only instance exited", cursor.Info{SourceWait: "column ..."}, behind, cursor.StatusNotRunning},
		{"paused while the source changed", cursor.Info{Connected: 1, SourceWait: "column ...", State: inordertype.State{Paused: true}}, behind, cursor.StatusPaused},
		{"partitioned", cursor.Info{Partitions: 4}, nil, cursor.StatusPartitioned},
		{"not running", cursor.Info{}, behind, cursor.StatusNotRunning},
		{"running", cursor.Info{Connected: 1}, behind, cursor.StatusRunning},
		{"idle", cursor.Info{Connected: 1, Locked: true}, none, cursor.StatusIdle},
		{"held", cursor.Info{Connected: 1, HeldSince: now}, behind, cursor.StatusHeld},
		{"held with nothing behind is idle", cursor.Info{Connected: 1, HeldSince: now}, none, cursor.StatusIdle},
		{"running, behind unknown", cursor.Info{Locked: true}, nil, cursor.StatusRunning},
		{"held, behind unknown", cursor.Info{Locked: true, HeldSince: now}, nil, cursor.StatusHeld},
		{"caught up, as List found it", cursor.Info{Locked: true, CaughtUp: true}, nil, cursor.StatusIdle},
		{"held and caught up, as List found it", cursor.Info{Locked: true, HeldSince: now, CaughtUp: true}, nil, cursor.StatusIdle},
		{"caught up but stopped", cursor.Info{CaughtUp: true}, nil, cursor.StatusNotRunning},
		{"caught up but paused", cursor.Info{Locked: true, CaughtUp: true, State: inordertype.State{Paused: true}}, nil, cursor.StatusPaused},
		{"the count decides over an earlier look", cursor.Info{Locked: true, CaughtUp: true}, behind, cursor.StatusRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, cursor.StatusOf(tc.in, tc.lag))
		})
	}
}

// TestInfoEncodesAsStatusDoes: a service's admin endpoint can serve cursor.Info as it is, with the names
// of `inorder status --json` and null for times that are unset.
func TestInfoEncodesAsStatusDoes(t *testing.T) {
	t.Parallel()
	in := cursor.Info{Process: "billing", Status: cursor.StatusHalted, Locked: true, Holder: "a", Epoch: 3,
		State: inordertype.State{Halt: &inordertype.Halt{RecordID: "7", Error: "400", Attempts: 2, Permanent: true}}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "billing", got["process"])
	require.Equal(t, "halted", got["state"])
	require.Equal(t, true, got["locked"])
	require.Equal(t, "a", got["holder"])
	require.EqualValues(t, 3, got["owner_epoch"])
	require.Nil(t, got["lease_expires_at"], "an unset time is null")
	require.Nil(t, got["hold"])
	require.Nil(t, got["source_wait"])
	require.Equal(t, map[string]any{"created_at": nil, "id": nil}, got["position"], "the beginning")
	halt := got["halt"].(map[string]any)
	require.Equal(t, "7", halt["record_id"])
	require.Nil(t, halt["next_attempt_at"])
	require.Nil(t, halt["status"])
	require.NotContains(t, got, "Process")
	require.NotContains(t, got, "HeldSince")
}
