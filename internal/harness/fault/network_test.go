package fault

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
)

// pastBound is how long a scenario of this file goes on watching after a bound was missed, so that its
// failure says by how much.
const pastBound = time.Minute

// deadConnectionBound is how soon after every connection of the children went dead delivery must resume,
// and the owner say that it lost its connection.
const deadConnectionBound = 20 * time.Second

// deadConnection runs two instances of each stream through a TCP proxy (the writers and the checks
// connect directly) and, once they deliver, makes every connection open through it dead for good, as a
// NAT or a load balancer that forgot them does: the proxy goes on reading both sides, so that neither
// kernel sees anything wrong, and passes nothing on; connections opened later pass. The children run
// with the suite's usual flags, no lease or timeout of the scenario's own. Delivery must resume by itself
// within deadConnectionBound: a record committed after the cut, which none of the dead connections can
// have read, delivered by either instance; and the owner must log a line about its connection within the
// same bound. Then the usual checks, and no delivery by an instance the cursor row did not name as owner.
func deadConnection(t *testing.T) {
	w := sharedWorld(t, "dead_connection")
	proxy := startProxy(t, w.url)
	via := proxy.URL(w.url)
	sts := streamsFor("dead_connection", "record")
	w.write(writerCount)
	for _, st := range sts {
		w.startAt(st, via)
		w.startAt(st, via)
	}
	w.warmup(sts)
	w.sleep(100*time.Millisecond, 400*time.Millisecond)
	type watch struct {
		owner   *child
		logFrom int // the length of the owner's log at the cut

		resumed  *delivery
		noticed  time.Duration // when the owner's line was seen, after the cut
		line     string
		resumeAt time.Duration
	}
	watches := map[string]*watch{}
	for _, st := range sts {
		wt := &watch{}
		w.await("an owner of "+st.process, 30*time.Second, func() bool { wt.owner = w.owner(st); return wt.owner != nil })
		watches[st.process] = wt
	}
	for _, wt := range watches {
		wt.logFrom = len(wt.owner.logs())
	}
	sinkFrom := w.sink.len()
	conns := proxy.Conns()
	proxy.Swallow()
	cut := time.Now()
	// Every row with a greater id commits after this read, so after the cut: none of the connections
	// that went dead can have read it.
	var lastID int64
	require.NoError(t, w.pool.QueryRow(context.Background(), "SELECT coalesce(max(id), 0) FROM events").Scan(&lastID))
	t.Logf("cut the %d connections open through the proxy; the last row committed before the cut is %d", conns, lastID)

	deadline := cut.Add(deadConnectionBound + pastBound)
	next := sinkFrom
	for {
		for _, d := range w.sink.since(next) {
			next++
			if wt := watches[d.Process]; wt != nil && wt.resumed == nil && d.ID > lastID {
				wt.resumed, wt.resumeAt = &d, d.At.Sub(cut)
			}
		}
		done := true
		for _, wt := range watches {
			if wt.line == "" {
				if line := connectionLine(wt.owner.logs()[wt.logFrom:]); line != "" {
					wt.line, wt.noticed = line, time.Since(cut)
				}
			}
			done = done && wt.line != "" && wt.resumed != nil
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	watched := time.Since(cut).Round(time.Second)

	crashes := map[string]int{}
	stuck := false
	for _, st := range sts {
		wt := watches[st.process]
		crashes[st.process]++
		switch {
		case wt.line == "":
			t.Errorf("%s: the owner %s logged no line about its database connection within %s of the cut: "+
				"the bound is %s, missed by more than %s", st.process, wt.owner.name, watched, deadConnectionBound,
				watched-deadConnectionBound)
		case wt.noticed > deadConnectionBound:
			t.Errorf("%s: the owner %s logged about its database connection %s after the cut, %s over the bound "+
				"of %s: %s", st.process, wt.owner.name, wt.noticed.Round(time.Millisecond),
				(wt.noticed - deadConnectionBound).Round(time.Millisecond), deadConnectionBound, wt.line)
		default:
			t.Logf("%s: the owner %s logged %s after the cut: %s", st.process, wt.owner.name,
				wt.noticed.Round(time.Millisecond), wt.line)
		}
		switch {
		case wt.resumed == nil:
			stuck = true
			t.Errorf("%s: delivery did not resume within %s of the cut: the bound is %s, missed by more than %s "+
				"(no record committed after the cut was delivered; %d records delivered in all)", st.process, watched,
				deadConnectionBound, watched-deadConnectionBound, w.sink.count(st.process))
		case wt.resumeAt > deadConnectionBound:
			t.Errorf("%s: delivery resumed %s after the cut (record %d, by %s), %s over the bound of %s", st.process,
				wt.resumeAt.Round(time.Millisecond), wt.resumed.ID, wt.resumed.Instance,
				(wt.resumeAt - deadConnectionBound).Round(time.Millisecond), deadConnectionBound)
		default:
			t.Logf("%s: delivery resumed %s after the cut (record %d, by %s)", st.process,
				wt.resumeAt.Round(time.Millisecond), wt.resumed.ID, wt.resumed.Instance)
		}
	}
	if stuck {
		t.FailNow() // nothing more to check: the streams would not drain
	}
	w.calm()
	w.finish(sts, crashes)
	var kids []*child
	for _, st := range sts {
		w.checkOwners(st)
		kids = append(kids, w.live(st)...)
	}
	require.Len(t, kids, 2*len(sts), "no child exited by itself")
	w.stopCleanly(kids...)
}

// connectionLine returns the first line of logs that speaks of a connection, or "".
func connectionLine(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(strings.ToLower(line), "connection") {
			return line
		}
	}
	return ""
}

// busyOwnerCutBound is how soon after the owner's connection went dead the standby must deliver, with
// busyOwnerLease.
const busyOwnerCutBound = 15 * time.Second

// busyOwnerLease is the --lease of the instances of busy_owner_cut.
const busyOwnerLease = 10 * time.Second

// backlogPerAggregate is how many rows busy_owner_cut commits for each aggregate before its owner starts.
const backlogPerAggregate = 150

// receiverTime is how long the receiver takes to answer each request of busy_owner_cut until the standby
// has taken over: long enough that the backlog keeps the owner busy.
const receiverTime = 20 * time.Millisecond

// busyOwnerCut cuts the connection of an owner busy with a backlog. A few thousand rows are committed before
// it starts, the receiver answers each request in receiverTime, the position is made durable per batch
// and the lease is busyOwnerLease. The owner connects through a TCP proxy of its stream's own; the standby
// connects directly. While the owner works through the backlog, it is cut off from the database: every
// connection of the proxy goes dead for good (see deadConnection) and new ones are accepted but never
// answered, so that the owner cannot come back by reconnecting. The standby must deliver within
// busyOwnerCutBound of the cut; from then on the receiver answers at once again, and the path heals, so
// that the old owner reconnects and must stand by. Then the usual checks, and after the standby took over no
// delivery by the old owner: neither after the standby's first delivery, nor after the write of the
// cursor row by which it took the process, nor while the cursor row named another owner.
func busyOwnerCut(t *testing.T) {
	w := sharedWorld(t, "busy_owner_cut")
	sts := []stream{{process: "busy_owner_cut_batch", checkpoint: "batch", batch: 20, horizon: "auto"}}
	if full {
		sts = append(sts, stream{process: "busy_owner_cut_txn", checkpoint: "batch", batch: 20, horizon: "transactions"})
	}
	extra := []string{"--lease", busyOwnerLease.String()}
	w.write(writerCount)
	backlog := w.backlog(backlogPerAggregate)
	type cutOwner struct {
		st             stream
		proxy          *tcpproxy.Proxy
		owner, standby *child
		cut            time.Time
		sinkFrom       int
		delivered      int // distinct records at the cut
		took           *delivery
		tookAt         time.Duration
	}
	var cuts []*cutOwner
	for _, st := range sts {
		w.sink.slow(st.process, receiverTime)
		c := &cutOwner{st: st, proxy: startProxy(t, w.url)}
		c.owner = w.startAt(st, c.proxy.URL(w.url), extra...)
		cuts = append(cuts, c)
	}
	for _, c := range cuts {
		w.await(c.owner.name+" to own "+c.st.process, time.Minute, func() bool { return w.owner(c.st) == c.owner })
		c.standby = w.startAt(c.st, w.url, extra...)
	}
	for _, c := range cuts {
		w.await(c.standby.name+" to stand by", time.Minute, func() bool {
			return c.standby.count("another instance works the process; standing by") > 0
		})
		w.await(c.owner.name+" to work through the backlog", time.Minute, func() bool { return w.sink.count(c.st.process) >= 50 })
	}
	w.sleep(100*time.Millisecond, 400*time.Millisecond)
	for _, c := range cuts {
		if w.owner(c.st) != c.owner {
			t.Fatalf("%s: %s no longer owned the process before the cut", c.st.process, c.owner.name)
		}
		c.sinkFrom = w.sink.len()
		c.proxy.SwallowNew(true)
		c.proxy.Swallow()
		c.cut = time.Now()
		c.delivered = w.distinct(c.st)
	}
	for _, c := range cuts {
		require.Less(t, c.delivered, len(backlog), "%s: the owner was through the backlog before the cut", c.st.process)
		t.Logf("%s: cut the connections of the owner %s after %d of the %d rows of the backlog", c.st.process,
			c.owner.name, c.delivered, len(backlog))
	}

	deadline := time.Now().Add(busyOwnerCutBound + pastBound)
	next := w.sink.len()
	for _, c := range cuts {
		next = min(next, c.sinkFrom)
	}
	for {
		done := true
		for _, d := range w.sink.since(next) {
			next++
			for _, c := range cuts {
				if c.took == nil && d.Process == c.st.process && d.Instance == c.standby.name {
					c.took, c.tookAt = &d, d.At.Sub(c.cut)
					w.sink.slow(c.st.process, 0)
					c.proxy.Heal() // the old owner comes back, and must find the process taken
				}
			}
		}
		for _, c := range cuts {
			done = done && c.took != nil
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stuck := false
	for _, c := range cuts {
		switch watched := time.Since(c.cut).Round(time.Second); {
		case c.took == nil:
			stuck = true
			t.Errorf("%s: the standby %s did not deliver within %s of the cut of the owner %s: the bound is %s "+
				"(--lease %s), missed by more than %s", c.st.process, c.standby.name, watched, c.owner.name,
				busyOwnerCutBound, busyOwnerLease, watched-busyOwnerCutBound)
		case c.tookAt > busyOwnerCutBound:
			t.Errorf("%s: the standby %s delivered first %s after the cut of the owner %s (record %d), %s over the "+
				"bound of %s (--lease %s)", c.st.process, c.standby.name, c.tookAt.Round(time.Millisecond), c.owner.name,
				c.took.ID, (c.tookAt - busyOwnerCutBound).Round(time.Millisecond), busyOwnerCutBound, busyOwnerLease)
		default:
			t.Logf("%s: the standby %s delivered first %s after the cut of the owner %s (record %d)", c.st.process,
				c.standby.name, c.tookAt.Round(time.Millisecond), c.owner.name, c.took.ID)
		}
	}
	if stuck {
		t.FailNow() // nothing more to check: the streams would not drain
	}

	w.calm()
	crashes := map[string]int{}
	for _, c := range cuts {
		crashes[c.st.process]++
	}
	w.finish(sts, crashes)
	log, audit := w.sink.deliveries(), w.audit()
	for _, c := range cuts {
		w.checkOwners(c.st)
		var late []string
		first := -1 // the standby's first delivery
		for i, d := range log[c.sinkFrom:] {
			if d.Process != c.st.process {
				continue
			}
			if first < 0 && d.Instance == c.standby.name {
				first = c.sinkFrom + i
			}
			if first >= 0 && d.Instance == c.owner.name {
				late = append(late, fmt.Sprintf("record %d (delivery %d)", d.ID, c.sinkFrom+i))
			}
		}
		if len(late) > 0 {
			t.Errorf("%s: the old owner %s delivered after the standby %s's first delivery (delivery %d): %s",
				c.st.process, c.owner.name, c.standby.name, first, strings.Join(late[:min(len(late), 10)], ", "))
		}
		// The write of the cursor row by which the standby took the process, by the server's clock, which is
		// compared with the receiver's: the old owner's last deliveries before it come most of a lease
		// earlier, so that a small skew between the two cannot matter.
		var takeover *auditRow
		for i, a := range audit {
			if a.process == c.st.process && a.owner == c.standby.name {
				takeover = &audit[i]
				break
			}
		}
		require.NotNil(t, takeover, "%s: no write of the cursor row names the standby %s as owner", c.st.process, c.standby.name)
		late = late[:0]
		for i, d := range log[c.sinkFrom:] {
			if d.Process == c.st.process && d.Instance == c.owner.name && d.At.After(takeover.at) {
				late = append(late, fmt.Sprintf("record %d (delivery %d, %s after it)", d.ID, c.sinkFrom+i,
					d.At.Sub(takeover.at).Round(time.Millisecond)))
			}
		}
		t.Logf("%s: the standby %s took the process under epoch %d %s after the cut", c.st.process, c.standby.name,
			takeover.epoch, takeover.at.Sub(c.cut).Round(time.Millisecond))
		if len(late) > 0 {
			t.Errorf("%s: the old owner %s delivered after the write by which the standby %s took the process "+
				"(write %d, epoch %d): %s", c.st.process, c.owner.name, c.standby.name, takeover.n, takeover.epoch,
				strings.Join(late[:min(len(late), 10)], ", "))
		}
	}
	var kids []*child
	for _, c := range cuts {
		kids = append(kids, c.owner, c.standby)
	}
	w.stopCleanly(kids...)
}

// startProxy starts a TCP proxy in front of the server of url, closed when the test ends.
func startProxy(t *testing.T, url string) *tcpproxy.Proxy {
	t.Helper()
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	if strings.HasPrefix(cc.Host, "/") {
		t.Skipf("the server is reached through the Unix socket %s; the proxy forwards TCP", cc.Host)
	}
	p, err := tcpproxy.Start(tcpproxy.Config{Target: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// backlog commits perAggregate rows for each aggregate in one transaction, as a bulk import does, and
// returns their ids; the writers count them as committed. It locks every aggregate first, so that the
// rows take each aggregate's next sequence numbers while the writers go on.
func (w *world) backlog(perAggregate int) []int64 {
	w.t.Helper()
	return w.backlogOf(perAggregate, 0)
}

// backlogOf is backlog with a JSON document of about docBytes in each row's payload column, built by the
// server (internal/harness/jsondoc; the big_rows scenario adds the column and the function); 0 writes no
// payload, for the events table of the other scenarios, which has none.
func (w *world) backlogOf(perAggregate, docBytes int) []int64 {
	w.t.Helper()
	ctx := context.Background()
	tx, err := w.pool.Begin(ctx)
	require.NoError(w.t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT id FROM aggregates ORDER BY id FOR UPDATE")
	require.NoError(w.t, err)
	insert, args := `
		INSERT INTO events (aggregate_id, seq)
		SELECT a.id, a.seq + g FROM aggregates a, generate_series(1, $1) g ORDER BY g, a.id
		RETURNING id`, []any{perAggregate}
	if docBytes > 0 {
		insert, args = `
			INSERT INTO events (aggregate_id, seq, payload)
			SELECT a.id, a.seq + g, jsondoc(a.seq + g, $2) FROM aggregates a, generate_series(1, $1) g ORDER BY g, a.id
			RETURNING id`, []any{perAggregate, docBytes}
	}
	rows, err := tx.Query(ctx, insert, args...)
	require.NoError(w.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(w.t, err)
	_, err = tx.Exec(ctx, "UPDATE aggregates SET seq = seq + $1", perAggregate)
	require.NoError(w.t, err)
	require.NoError(w.t, tx.Commit(ctx))
	w.writers.add(ids)
	return ids
}

// checkOwners checks that every delivery of st's records was made by the instance the cursor row named as
// owner when the receiver got it, wherever the position monitor can tell (see strangers).
func (w *world) checkOwners(st stream) {
	w.t.Helper()
	bad, checked, all := strangers(st.process, st.batch, w.sink.deliveries(), w.mon.owners(st.process))
	w.t.Logf("%s: %d of %d deliveries checked against the owner the cursor row named", st.process, checked, all)
	if len(bad) > 0 {
		w.t.Errorf("%s: %d deliveries by an instance that did not own the process: %s", st.process, len(bad),
			strings.Join(bad[:min(len(bad), 10)], "; "))
	}
}

// strangers returns the deliveries of process in log made by an instance other than the one its cursor row
// named as owner when the receiver got them, wherever spans (the position monitor's, of that process) can
// tell: between two polls that saw the same owner under the same epoch. An instance takes the process in
// the transaction of a batch, which holds the row locked, and may deliver that batch (at most batch
// records) before it commits: the last deliveries of a span may be the next owner's, after the last of its
// owner's. It also counts the deliveries of process it could check, and all of them.
func strangers(process string, batch int, log []delivery, spans []ownerSpan) (bad []string, checked, all int) {
	for _, d := range log {
		if d.Process == process {
			all++
		}
	}
	for k, sp := range spans {
		var in []int // the span's deliveries of process, by index in log
		for i := sp.from; i < min(sp.until, len(log)); i++ {
			if log[i].Process == process {
				in = append(in, i)
			}
		}
		checked += len(in)
		// The deliveries after the owner's last one may be the next owner's, taking the process.
		tail := len(in)
		for tail > 0 && log[in[tail-1]].Instance != sp.owner {
			tail--
		}
		if n := len(in) - tail; n > 0 && n <= batch {
			next := log[in[tail]].Instance
			taking := k+1 >= len(spans) || spans[k+1].owner == next
			for _, i := range in[tail:] {
				taking = taking && log[i].Instance == next
			}
			if taking {
				in = in[:tail]
			}
		}
		for _, i := range in {
			if d := log[i]; d.Instance != sp.owner {
				owner := sp.owner
				if owner == "" {
					owner = "no one"
				}
				bad = append(bad, fmt.Sprintf("record %d (delivery %d) by %s while the cursor row named %s (epoch %d)",
					d.ID, i, d.Instance, owner, sp.epoch))
			}
		}
	}
	return bad, checked, all
}

// TestStrangers proves that strangers tells a delivery by an instance that did not own the process from
// the deliveries of an instance taking the process in the transaction of a batch.
func TestStrangers(t *testing.T) {
	t.Parallel()
	spans := []ownerSpan{
		{process: "p", owner: "", epoch: 0, from: 0, until: 2},
		{process: "p", owner: "a", epoch: 1, from: 2, until: 8},
		{process: "p", owner: "b", epoch: 2, from: 9, until: 12},
	}
	by := func(instances ...string) []delivery {
		var log []delivery
		for i, in := range instances {
			log = append(log, delivery{Process: "p", ID: int64(i), Instance: in})
		}
		return log
	}
	// a takes the process (its first deliveries before the row names it), b takes it from a.
	bad, checked, all := strangers("p", 3, by("a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "b"), spans)
	require.Empty(t, bad)
	require.Equal(t, 11, checked) // delivery 8 falls between two spans
	require.Equal(t, 12, all)

	// a delivers after b took the process.
	bad, _, _ = strangers("p", 3, by("a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "a", "b"), spans)
	require.Equal(t, []string{"record 10 (delivery 10) by a while the cursor row named b (epoch 2)"}, bad)

	// b delivers amid a's deliveries: it does not own the process yet.
	bad, _, _ = strangers("p", 3, by("a", "a", "a", "b", "a", "a", "b", "b", "b", "b", "b", "b"), spans)
	require.Equal(t, []string{"record 3 (delivery 3) by b while the cursor row named a (epoch 1)"}, bad)

	// With a batch of one, a and b each deliver more than a batch before the row names them.
	bad, _, _ = strangers("p", 1, by("a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "b"), spans)
	require.Len(t, bad, 4)

	// c, which never owns the process, ends a's span.
	bad, _, _ = strangers("p", 3, by("a", "a", "a", "a", "a", "a", "a", "c", "b", "b", "b", "b"), spans)
	require.Equal(t, []string{"record 7 (delivery 7) by c while the cursor row named a (epoch 1)"}, bad)
}
