package fault

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/jsondoc"
)

// Sizes of the big_rows scenario: each round commits a backlog of a row for every aggregate, each
// carrying a document of bigDocBytes; the short form's rounds make 6 MiB of documents in all, the full
// form's 96 MiB.
var (
	bigDocBytes = pick(128<<10, 1<<20)
	bigRounds   = pick(3, 6)
)

// bigBatch is the big_rows streams' --batch-size: a backlog spans several batches, so that a checkpoint
// lands amid it.
const bigBatch = 5

// bigTimeouts are the big_rows children's timeouts: a request of a MiB to a receiver built with the race
// detector, on a busy machine, has taken longer than the suite's usual 5s for the handler, and a record
// sent again for that is not the loss the scenario makes.
var bigTimeouts = []string{"--idle-timeout", "60s", "--lease", "90s", "--handler-timeout", "25s", "--webhook-timeout", "20s"}

// bigRows drains rows that carry JSON documents beside the writers' small ones, and ends the processor's
// cursor backend right after a checkpoint has moved the position into the documents: every other round at
// once, and every other round once the receiver holds the next record, so that the records delivered since
// the checkpoint must be sent again. Every record must be delivered, in order, and none that the position
// covered at the moment of the loss sent again.
func bigRows(t *testing.T) {
	w := sharedWorld(t, "big_rows")
	_, err := w.pool.Exec(context.Background(), jsondoc.FunctionSQL+
		"; ALTER TABLE events ADD COLUMN payload jsonb; ALTER TABLE events_created_at ADD COLUMN payload jsonb")
	require.NoError(t, err)
	sts := streamsFor("big_rows", "batch")
	for i := range sts {
		sts[i].batch = bigBatch
	}
	w.write(writerCount)
	kids := map[string]*child{}
	for _, st := range sts {
		kids[st.process] = w.start(st, bigTimeouts...)
	}
	w.warmup(sts)
	crashes := map[string]int{}
	var losses []bigLoss
	for round := range bigRounds {
		ids := w.backlogOf(1, bigDocBytes)
		reconnected := map[string]int{} // by process whose backend was ended: its reconnections before
		w.amidDocuments(sts, ids, func(st stream) {
			c := kids[st.process]
			before := c.count("reconnected")
			var g *gate
			if round%2 == 1 {
				g = w.sink.hold(st.process)
				w.awaitStarted(g)
			}
			loss := bigLoss{process: st.process, round: round, held: g != nil, position: w.position(st), at: w.sink.len()}
			ended, inTx := w.terminate(st)
			if g != nil {
				g.open()
			}
			if !ended {
				t.Logf("%s: round %d, checkpoint at record %s: the backend was gone before it could be ended",
					st.process, round, loss.position)
				return
			}
			loss.inTx = inTx
			losses = append(losses, loss)
			crashes[st.process]++
			reconnected[st.process] = before
		})
		for process, before := range reconnected {
			c := kids[process]
			w.await(c.name+" to reconnect", 30*time.Second, func() bool { return c.count("reconnected") > before })
		}
	}
	w.calm()
	for _, c := range kids {
		require.True(t, c.running(), "%s exited", c.name)
	}
	reports := w.finish(sts, crashes)
	log, obs := w.sink.deliveries(), w.mon.observations()
	for i, l := range losses {
		until := len(log)
		for _, next := range losses[i+1:] {
			if next.process == l.process {
				until = next.at
				break
			}
		}
		t.Logf("%s: round %d, the backend ended right after the checkpoint at record %s (in a transaction %v, the "+
			"receiver holding a record %v): records sent again %d", l.process, l.round, l.position, l.inTx, l.held,
			sentAgain(l.process, log, l.at, until))
	}
	for _, st := range sts {
		if crashes[st.process] == 0 {
			t.Errorf("%s: no checkpoint was caught amid the documents", st.process)
		}
		if bad := resentCovered(st.process, reports[st.process].rank, log, obs); len(bad) > 0 {
			t.Errorf("%s: %d records sent again that the position already covered: %s", st.process, len(bad),
				strings.Join(bad[:min(len(bad), 10)], "; "))
		}
	}
	for _, c := range kids {
		w.stopCleanly(c)
	}
}

// bigLoss is a backend the big_rows scenario ended: the position then, and how many deliveries the
// receiver had recorded.
type bigLoss struct {
	process, position string
	round, at         int
	held, inTx        bool
}

// sentAgain counts the deliveries of process in log[from:until] of records delivered before them.
func sentAgain(process string, log []delivery, from, until int) int {
	seen := map[int64]bool{}
	n := 0
	for i, d := range log[:until] {
		if d.Process != process {
			continue
		}
		if i >= from && seen[d.ID] {
			n++
		}
		seen[d.ID] = true
	}
	return n
}

// amidDocuments polls the position of each stream of sts until it stands on one of the rows ids (a
// backlog's, in order) but the last, a checkpoint amid them, and then calls hit with the stream at once. A
// stream whose position reaches the last of them first is left out of the round.
func (w *world) amidDocuments(sts []stream, ids []int64, hit func(stream)) {
	w.t.Helper()
	amid := map[int64]bool{}
	for _, id := range ids[:len(ids)-1] {
		amid[id] = true
	}
	last := ids[len(ids)-1]
	waiting := slices.Clone(sts)
	deadline := time.Now().Add(time.Minute)
	for len(waiting) > 0 {
		if time.Now().After(deadline) {
			w.t.Fatalf("no checkpoint amid the documents %d to %d within a minute", ids[0], last)
		}
		waiting = slices.DeleteFunc(waiting, func(st stream) bool {
			var pos int64
			var passed bool
			at := func(alias string) string { return alias + ".created_at" }
			if w.clocked && st.table() == "events" { // the stream's order: the insert clock's
				at = func(alias string) string { return fmt.Sprintf("coalesce(%[1]s.inorder_at, %[1]s.created_at)", alias) }
			}
			err := w.pool.QueryRow(context.Background(), `
				SELECT p.position_id::bigint, (`+at("e")+`, e.id) >= (`+at("l")+`, l.id)
				FROM inorder.position AS p JOIN events AS e ON e.id = p.position_id::bigint, events AS l
				WHERE p.process_name = $1 AND l.id = $2`, st.process, last).Scan(&pos, &passed)
			switch {
			case err != nil: // no position yet
			case amid[pos]:
				hit(st)
				return true
			case passed:
				w.t.Logf("%s: the position passed the documents before a checkpoint amid them was seen", st.process)
				return true
			}
			return false
		})
		time.Sleep(time.Millisecond)
	}
}

// TestResentCovered proves that resentCovered tells a record sent again after the position had covered it
// from one sent again after a loss that the position had not reached, and goes by what the receiver had
// recorded when each position was polled.
func TestResentCovered(t *testing.T) {
	t.Parallel()
	rank := map[int64]int{10: 0, 11: 1, 12: 2, 13: 3}
	d := func(process string, id int64) delivery { return delivery{Process: process, ID: id} }
	// 10 to 12 delivered, the position at 11 polled once 3 deliveries were in; the loss sends 12 again.
	log := []delivery{d("p", 10), d("p", 11), d("p", 12), d("q", 11), d("p", 12), d("p", 13)}
	obs := []posObs{{process: "p", id: 11, sinkLen: 3}, {process: "q", id: 13, sinkLen: 3}}
	require.Empty(t, resentCovered("p", rank, log, obs))

	// 11 sent again after the position at 11 was polled: covered.
	log = []delivery{d("p", 10), d("p", 11), d("p", 12), d("p", 11), d("p", 12), d("p", 13)}
	require.Equal(t, []string{"record 11 sent again (delivery 3) after the position had reached record 11"},
		resentCovered("p", rank, log, obs))

	// The same deliveries, the position polled only once the resend was in: it may have come before.
	obs = []posObs{{process: "p", id: 11, sinkLen: 4}}
	require.Empty(t, resentCovered("p", rank, log, obs))
}
