package inordertype_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
)

// TestStartFromRoundTrip: ParseStartFrom reads back what String writes for each of the three starts, a
// time keeping its nanoseconds in UTC, and the zero value says nothing and is none of them.
func TestStartFromRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))
	for _, s := range []inordertype.StartFrom{inordertype.StartFromBeginning, inordertype.StartFromNow, inordertype.StartFromTime(at)} {
		back, err := inordertype.ParseStartFrom(s.String())
		require.NoError(t, err, s.String())
		require.Equal(t, s, back)
		require.False(t, back.IsZero())
	}
	require.True(t, inordertype.StartFromTime(at).Time().Equal(at))
	require.Equal(t, time.UTC, inordertype.StartFromTime(at).Time().Location())
	require.True(t, inordertype.StartFromTime(time.Time{}).IsBeginning())

	var zero inordertype.StartFrom
	require.True(t, zero.IsZero())
	require.False(t, zero.IsBeginning())
	require.False(t, zero.IsNow())
	require.True(t, zero.Time().IsZero())
	require.Empty(t, zero.String())

	for _, bad := range []string{"", "Beginning", "yesterday", "2024-05-01"} {
		_, err := inordertype.ParseStartFrom(bad)
		require.Error(t, err, bad)
	}
}

// TestHaltStates: a halt is retrying until HaltedAt is set, and the sink's outage is told apart.
func TestHaltStates(t *testing.T) {
	t.Parallel()
	h := &inordertype.Halt{RecordID: "7", Attempts: 1}
	require.True(t, h.Retrying())
	require.False(t, h.SinkUnavailable())
	h.HaltedAt, h.Unavailable = time.Now(), "check the URL"
	require.False(t, h.Retrying())
	require.True(t, h.SinkUnavailable())
}
