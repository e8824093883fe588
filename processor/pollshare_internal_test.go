package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTakesASharedPoll(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name                     string
		at, sent, lastPoll, need time.Time
		want                     bool
	}{
		{name: "none yet", want: false},
		{name: "fresh and newer", at: now.Add(-ms), sent: now.Add(-2 * ms), lastPoll: now.Add(-time.Second), want: true},
		{name: "older than shareFresh", at: now.Add(-9 * ms), sent: now.Add(-10 * ms), lastPoll: now.Add(-time.Second), want: false},
		{name: "just within shareFresh", at: now, sent: now.Add(-shareFresh), lastPoll: now.Add(-time.Second), want: true},
		{name: "the one already folded", at: now.Add(-ms), sent: now.Add(-2 * ms), lastPoll: now.Add(-ms), want: false},
		{name: "older than the one folded", at: now.Add(-2 * ms), sent: now.Add(-3 * ms), lastPoll: now.Add(-ms), want: false},
		{name: "sent after the wake-up, however old", at: now.Add(-time.Second), sent: now.Add(-time.Second),
			lastPoll: now.Add(-time.Minute), need: now.Add(-2 * time.Second), want: true},
		{name: "sent before the wake-up, however fresh", at: now.Add(-ms), sent: now.Add(-2 * ms),
			lastPoll: now.Add(-time.Minute), need: now.Add(-ms), want: false},
		{name: "sent at the wake-up", at: now.Add(-ms), sent: now.Add(-2 * ms),
			lastPoll: now.Add(-time.Minute), need: now.Add(-2 * ms), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, takes(tc.at, tc.sent, tc.lastPoll, tc.need, now))
		})
	}
}
