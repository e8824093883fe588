package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
)

func TestAfterComparesWholePositions(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	pos := func(d time.Duration, id string) inordertype.Position {
		return inordertype.Position{CreatedAt: at.Add(d), ID: id}
	}
	for _, tc := range []struct {
		name string
		a, b inordertype.Position
		want bool
	}{
		{"later time", pos(time.Millisecond, "1"), pos(0, "9"), true},
		{"earlier time", pos(0, "9"), pos(time.Millisecond, "1"), false},
		{"same time, larger number", pos(0, "10"), pos(0, "9"), true},
		{"same time, smaller number", pos(0, "9"), pos(0, "10"), false},
		{"same time, text", pos(0, "b"), pos(0, "a"), true},
		{"same position", pos(0, "5"), pos(0, "5"), false},
		{"from the beginning", pos(0, "1"), inordertype.Position{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, after(tc.a, tc.b))
		})
	}
}
