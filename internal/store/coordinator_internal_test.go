package store

import (
	"strings"
	"testing"
)

func TestCoordinatorOfMatchesWholeAndCutNames(t *testing.T) {
	long := strings.Repeat("p", 60)
	cut := CoordinatorApplicationName(long, "host:1")[:63] // the server keeps 63 bytes
	for _, c := range []struct {
		app, process string
		want         bool
	}{
		{CoordinatorApplicationName("orders", "host:1"), "orders", true},
		{CoordinatorApplicationName("orders2", "host:1"), "orders", false},
		{CoordinatorApplicationName("orders", "host:1"), "orders2", false},
		{"inorder:orders@host:1", "orders", false},
		{cut, long, true},
		{cut, long + "x", true}, // a cut name cannot tell them apart: Forget refuses rather than deletes
		{cut[:50], long, false},
	} {
		if got := coordinatorOf(c.app, c.process); got != c.want {
			t.Errorf("coordinatorOf(%q, %q) = %v, want %v", c.app, c.process, got, c.want)
		}
	}
}
