package processor

import (
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// TestTracker folds sequences of polls into the tracker and checks the horizon after each, for both
// kinds. Each poll lists the transactions present: "w:" marks a writer of the source, "p:" a prepared
// writer (no pid), anything else a transaction that has not written to it.
func TestTracker(t *testing.T) {
	t.Parallel()
	const guard = 5 * time.Millisecond
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	less := func(ms int) time.Time { return at(ms).Add(-guard) }
	type poll struct {
		ms      int
		present []string
		// want is the horizon for each kind: the instant (ms, less the guard) or -1 for blocked.
		writers, transactions int
		holdPID               int // the pid named by the transactions horizon's hold, 0 for none
	}
	pids := map[string]int{"a": 101, "b": 102, "c": 103, "w:a": 101, "w:b": 102, "w:c": 103, "p:a": 0}
	for _, tc := range []struct {
		name  string
		polls []poll
	}{
		{name: "nothing in flight: now less the guard", polls: []poll{
			{ms: 0, writers: 0, transactions: 0},
			{ms: 100, writers: 100, transactions: 100},
		}},
		{name: "present at the first poll: unknown start blocks until it ends", polls: []poll{
			{ms: 0, present: []string{"a"}, writers: 0, transactions: -1, holdPID: 101},
			{ms: 100, present: []string{"a"}, writers: 100, transactions: -1, holdPID: 101},
			{ms: 200, writers: 200, transactions: 200},
		}},
		{name: "a transaction appearing is held at the last poll it was absent", polls: []poll{
			{ms: 0, writers: 0, transactions: 0},
			{ms: 100, present: []string{"a"}, writers: 100, transactions: 0, holdPID: 101},
			{ms: 200, present: []string{"a"}, writers: 200, transactions: 0, holdPID: 101},
			{ms: 300, present: []string{"w:a"}, writers: 200, transactions: 0, holdPID: 101},
			{ms: 400, present: []string{"w:a"}, writers: 200, transactions: 0, holdPID: 101},
			{ms: 500, writers: 500, transactions: 500},
		}},
		{name: "the earliest of several holds", polls: []poll{
			{ms: 0},
			{ms: 100, present: []string{"b"}, writers: 100, transactions: 0, holdPID: 102},
			{ms: 200, present: []string{"a", "b"}, writers: 200, transactions: 0, holdPID: 102},
			{ms: 300, present: []string{"w:a"}, writers: 200, transactions: 100, holdPID: 101},
			{ms: 400, present: []string{"w:a", "w:c"}, writers: 200, transactions: 100, holdPID: 101},
			{ms: 500, present: []string{"w:c"}, writers: 300, transactions: 300, holdPID: 103},
		}},
		{name: "a writer present at the first poll blocks both", polls: []poll{
			{ms: 0, present: []string{"w:a"}, writers: -1, transactions: -1, holdPID: 101},
			{ms: 100, present: []string{"w:a", "b"}, writers: -1, transactions: -1, holdPID: 101},
			{ms: 200, present: []string{"b"}, writers: 200, transactions: 0, holdPID: 102},
			{ms: 300, writers: 300, transactions: 300},
		}},
		{name: "a prepared transaction keeps its history across PREPARE", polls: []poll{
			{ms: 0},
			{ms: 100, present: []string{"a"}, writers: 100, transactions: 0, holdPID: 101},
			{ms: 200, present: []string{"w:a"}, writers: 100, transactions: 0, holdPID: 101},
			{ms: 300, present: []string{"p:a"}, writers: 100, transactions: 0, holdPID: 0},
			{ms: 900, present: []string{"p:a"}, writers: 100, transactions: 0, holdPID: 0},
			{ms: 1000, writers: 1000, transactions: 1000},
		}},
		{name: "a prepared transaction present at the first poll blocks both until resolved", polls: []poll{
			{ms: 0, present: []string{"p:a"}, writers: -1, transactions: -1, holdPID: 0},
			{ms: 100, present: []string{"p:a", "b"}, writers: -1, transactions: -1, holdPID: 0},
			{ms: 200, present: []string{"b"}, writers: 200, transactions: 0, holdPID: 102},
		}},
		{name: "a prepared transaction first seen after tracking began has an unknown start", polls: []poll{
			{ms: 0},
			{ms: 100, present: []string{"p:a"}, writers: -1, transactions: -1, holdPID: 0},
			{ms: 200, writers: 200, transactions: 200},
		}},
		{name: "a transaction id seen again after it was gone is a new one", polls: []poll{
			{ms: 0},
			{ms: 100, present: []string{"a"}, writers: 100, transactions: 0, holdPID: 101},
			{ms: 200, writers: 200, transactions: 200},
			{ms: 300, present: []string{"a"}, writers: 300, transactions: 200, holdPID: 101},
		}},
		{name: "writers alone do not move the transactions horizon earlier than their start", polls: []poll{
			{ms: 0},
			{ms: 100, present: []string{"w:a"}, writers: 0, transactions: 0, holdPID: 101},
			{ms: 200, present: []string{"w:a", "b"}, writers: 0, transactions: 0, holdPID: 101},
			{ms: 300, present: []string{"b"}, writers: 300, transactions: 100, holdPID: 102},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			byKind := map[inordertype.Horizon]*tracker{inordertype.HorizonWriters: newTracker(guard), inordertype.HorizonTransactions: newTracker(guard)}
			for _, p := range tc.polls {
				o := source.Observation{Now: at(p.ms), Writers: map[string]int{}, Txs: map[string]int{}}
				for _, name := range p.present {
					switch {
					case len(name) > 2 && name[1] == ':':
						o.Writers["1/"+name[2:]] = pids[name]
						// A live writer also holds its virtual transaction id; a prepared one does not.
						if name[0] == 'w' {
							o.Txs["1/"+name[2:]] = pids[name]
						}
					default:
						o.Txs["1/"+name] = pids[name]
					}
				}
				for kind, want := range map[inordertype.Horizon]int{inordertype.HorizonWriters: p.writers, inordertype.HorizonTransactions: p.transactions} {
					h := byKind[kind].observe(o, kind)
					if want < 0 {
						require.True(t, h.at.IsZero(), "%s at %dms: want blocked, got %s", kind, p.ms, h.at)
						require.NotNil(t, h.hold, "%s at %dms: a blocked horizon names its holder", kind, p.ms)
					} else {
						require.Equal(t, less(want), h.at, "%s at %dms", kind, p.ms)
					}
					if kind == inordertype.HorizonTransactions {
						if p.holdPID != 0 || (h.hold != nil && h.hold.PID == 0) {
							require.NotNil(t, h.hold, "at %dms", p.ms)
							require.Equal(t, p.holdPID, h.hold.PID, "at %dms", p.ms)
						}
						if h.hold == nil {
							require.Equal(t, less(p.ms), h.at, "at %dms: no hold, so now less the guard", p.ms)
						}
					}
				}
			}
		})
	}
}

func TestTrackerEarliestStart(t *testing.T) {
	t.Parallel()
	const guard = 5 * time.Millisecond
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tr := newTracker(guard)
	obs := func(ms int, txs ...string) {
		o := source.Observation{Now: t0.Add(time.Duration(ms) * time.Millisecond), Writers: map[string]int{}, Txs: map[string]int{}}
		for i, x := range txs {
			o.Txs[x] = 100 + i
		}
		tr.observe(o, inordertype.HorizonWriters)
	}
	obs(0, "1/1")
	at, unknown := tr.earliestStart()
	require.Equal(t, t0.Add(-guard), at, "unknown start: bounded by the first poll")
	require.Equal(t, []int{100}, unknown)

	obs(100, "1/1", "1/2")
	obs(200, "1/2", "1/3")
	at, unknown = tr.earliestStart()
	require.Equal(t, t0.Add(-guard), at, "1/2 was absent at the first poll")
	require.Equal(t, []int{100}, unknown, "1/1, found gone by the last poll, started before the first")

	// 1/2 ended by the poll at 300: it still counts at the next switch, since that poll may have read the
	// default from before a change that 1/2 was open across (see earliestStart).
	obs(300, "1/3")
	at, unknown = tr.earliestStart()
	require.Equal(t, t0.Add(-guard), at, "1/2, found gone by the last poll, counts")
	require.Empty(t, unknown)

	obs(400, "1/3")
	at, unknown = tr.earliestStart()
	require.Equal(t, t0.Add(100*time.Millisecond-guard), at, "gone for two polls, 1/2 no longer counts")
	require.Empty(t, unknown)
}

// TestTrackerHoldDoesNotFlap has two transactions of equal standing hold the horizon over many polls: the
// hold must name the same one every time, or status and the logs would flap between them.
func TestTrackerHoldDoesNotFlap(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, kind := range []inordertype.Horizon{inordertype.HorizonWriters, inordertype.HorizonTransactions} {
		tr := newTracker(5 * time.Millisecond)
		tr.observe(source.Observation{Now: t0, Writers: map[string]int{}, Txs: map[string]int{}}, kind)
		for i := 1; i <= 50; i++ {
			o := source.Observation{Now: t0.Add(time.Duration(i) * 100 * time.Millisecond),
				Writers: map[string]int{"7/1": 107, "3/1": 103, "5/1": 105},
				Txs:     map[string]int{"7/1": 107, "3/1": 103, "5/1": 105}}
			h := tr.observe(o, kind)
			require.NotNil(t, h.hold)
			require.Equal(t, 103, h.hold.PID, "%s, poll %d", kind, i)
		}
	}
}

func TestDefaultLogger(t *testing.T) {
	t.Parallel()
	require.Equal(t, zerolog.InfoLevel, defaultLogger(zerolog.Logger{}).GetLevel(), "the zero Logger logs at info")
	require.Equal(t, zerolog.Disabled, defaultLogger(zerolog.Nop()).GetLevel(), "zerolog.Nop() stays silent")
	custom := zerolog.New(io.Discard).Level(zerolog.WarnLevel)
	require.Equal(t, zerolog.WarnLevel, defaultLogger(custom).GetLevel(), "a given logger is used as is")
}
