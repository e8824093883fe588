package processor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/store"
)

// fleetOf makes a fleet in which every instance named in owned runs every process in processes.
func fleetOf(owned map[string]int, processes ...string) store.Fleet {
	f := store.Fleet{Owned: owned, Runners: map[string][]string{}}
	for _, p := range processes {
		for in := range owned {
			f.Runners[p] = append(f.Runners[p], in)
		}
	}
	return f
}

// The share is the processes owned divided by the instances, rounded up.
func TestFleetShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		owned map[string]int
		want  int
	}{
		{"no instance", map[string]int{}, 0},
		{"one instance", map[string]int{"a": 5}, 5},
		{"even", map[string]int{"a": 6, "b": 0, "c": 0}, 2},
		{"rounded up", map[string]int{"a": 4, "b": 3, "c": 0}, 3},
		{"thirty over three", map[string]int{"a": 15, "b": 15, "c": 0}, 10},
		{"nothing owned", map[string]int{"a": 0, "b": 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, fleetShare(store.Fleet{Owned: tc.owned}))
		})
	}
}

// An instance gives a process up only when it owns more than its share and another live instance that
// runs the process owns fewer than its share.
func TestShouldGive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fleet store.Fleet
		me    string
		want  bool
	}{
		{"after a rolling restart", fleetOf(map[string]int{"a": 3, "b": 3, "c": 0}, "x"), "a", true},
		{"the new instance gives nothing", fleetOf(map[string]int{"a": 3, "b": 3, "c": 0}, "x"), "c", false},
		{"one over, one under", fleetOf(map[string]int{"a": 3, "b": 2, "c": 1}, "x"), "a", true},
		{"balanced", fleetOf(map[string]int{"a": 2, "b": 2, "c": 2}, "x"), "a", false},
		{"within one: odd count", fleetOf(map[string]int{"a": 3, "b": 2, "c": 2}, "x"), "a", false},
		{"over its share but nobody under", fleetOf(map[string]int{"a": 3, "b": 3, "c": 1}, "x"), "a", false},
		{"alone", fleetOf(map[string]int{"a": 6}, "x"), "a", false},
		{"the one under does not run the process", store.Fleet{
			Owned:   map[string]int{"a": 4, "b": 2, "c": 0},
			Runners: map[string][]string{"x": {"a", "b"}}}, "a", false},
		{"the one under runs the process", store.Fleet{
			Owned:   map[string]int{"a": 4, "b": 2, "c": 0},
			Runners: map[string][]string{"x": {"a", "c"}}}, "a", true},
		{"not in the fleet yet", fleetOf(map[string]int{"b": 3, "c": 0}, "x"), "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, shouldGive(tc.fleet, tc.me, "x"))
		})
	}
}

// Whatever the counts, a process handed over is not handed back: after the move the giver may not give
// to the taker, and the taker may not give at all.
func TestAHandoverIsNeverHandedBack(t *testing.T) {
	t.Parallel()
	for a := 0; a <= 12; a++ {
		for b := 0; b <= 12; b++ {
			for c := 0; c <= 12; c++ {
				f := fleetOf(map[string]int{"a": a, "b": b, "c": c}, "x")
				if !shouldGive(f, "a", "x") {
					continue
				}
				for _, to := range []string{"b", "c"} {
					if f.Owned[to] >= fleetShare(f) {
						continue // not a taker
					}
					after := fleetOf(map[string]int{"a": a, "b": b, "c": c}, "x")
					after.Owned["a"]--
					after.Owned[to]++
					require.False(t, shouldGive(after, to, "x"), "a=%d b=%d c=%d: %s gives back", a, b, c, to)
				}
			}
		}
	}
}

// Balancing one process at a time from any start ends with every instance within one of the others
// for instances that run the same processes, and takes at most as many moves as the processes.
func TestBalancingEndsWithinTheBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		owned map[string]int
	}{
		{"six after a rolling restart", map[string]int{"a": 3, "b": 3, "c": 0}},
		{"six on one", map[string]int{"a": 6, "b": 0, "c": 0}},
		{"thirty after a rolling restart", map[string]int{"a": 15, "b": 15, "c": 0}},
		{"thirty on one", map[string]int{"a": 30, "b": 0, "c": 0}},
		{"seven over three", map[string]int{"a": 7, "b": 0, "c": 0}},
		{"two over three", map[string]int{"a": 2, "b": 0, "c": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fleetOf(tc.owned, "x")
			total := 0
			for _, n := range tc.owned {
				total += n
			}
			moves := 0
			for moved := true; moved; {
				moved = false
				for _, giver := range []string{"a", "b", "c"} {
					if !shouldGive(f, giver, "x") {
						continue
					}
					share := fleetShare(f)
					for _, taker := range []string{"a", "b", "c"} {
						if taker != giver && f.Owned[taker] < share && !moved {
							f.Owned[giver]--
							f.Owned[taker]++
							moved, moves = true, moves+1
						}
					}
				}
			}
			bound := (total + len(tc.owned) - 1) / len(tc.owned)
			for in, n := range f.Owned {
				require.LessOrEqual(t, n, bound, "instance %s", in)
				require.GreaterOrEqual(t, n, total/len(tc.owned)-1, "instance %s", in)
			}
			require.LessOrEqual(t, moves, total)
		})
	}
}

// A standby leaves a free process a moment to an instance of the process that owns fewer.
func TestShouldDefer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fleet store.Fleet
		me    string
		want  bool
	}{
		{"another owns fewer", fleetOf(map[string]int{"a": 3, "b": 1}, "x"), "a", true},
		{"the least loaded takes at once", fleetOf(map[string]int{"a": 3, "b": 1}, "x"), "b", false},
		{"a tie: both try", fleetOf(map[string]int{"a": 2, "b": 2}, "x"), "a", false},
		{"the one with fewer does not run it", store.Fleet{
			Owned: map[string]int{"a": 3, "b": 0}, Runners: map[string][]string{"x": {"a"}}}, "a", false},
		{"not looked at yet", store.Fleet{}, "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, shouldDefer(tc.fleet, tc.me, "x"))
		})
	}
}
