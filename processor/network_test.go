package processor_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/processor"
)

// through starts a proxy in front of b's database and returns it with a connection configuration through
// it.
func (b *bundle) through(t *testing.T) (*tcpproxy.Proxy, *pgx.ConnConfig) {
	t.Helper()
	proxy, err := tcpproxy.Start(tcpproxy.Config{Target: b.cfg.ClientConfig.ConnConfig.Host + ":" + strconv.Itoa(int(b.cfg.ClientConfig.ConnConfig.Port))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	cc, err := pgx.ParseConfig(proxy.URL(b.db.URL))
	require.NoError(t, err)
	return proxy, cc
}

// TestADeadConnectionIsReplacedInSeconds cuts every connection of an idle processor for good, as a NAT
// that forgot them (the proxy keeps them open and swallows what they carry, so that neither an error nor
// TCP's timeouts end them), while new connections pass: the rows written after the cut are delivered
// within the database timeout of the probe and of the cursor connection, with one line saying why.
func TestADeadConnectionIsReplacedInSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, cc := b.through(t)
	logs := &logBuffer{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.ClientConfig.DatabaseTimeout = cc, time.Second
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	start(t, cfg)
	b.insert(t, 5)
	waitFor(t, "the first rows", func() bool { return b.h.count() == 5 })

	proxy.Swallow()
	cut := time.Now()
	b.insert(t, 5)
	// The probe's statement (dial's default timeout, 5s) and the cursor's (1s here) each find their
	// connection dead; the bound leaves a few seconds for the reconnect on a loaded machine.
	// The cut may fall on the commit of the record just delivered, which is then delivered again: count
	// the records, not the deliveries.
	first := func() []int64 {
		seen := map[int64]bool{}
		var out []int64
		for _, id := range b.h.ids() {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(first()) == 10 }, 15*time.Second, 10*time.Millisecond,
		"rows written after the cut delivered")
	t.Logf("delivered %s after the cut", time.Since(cut).Round(time.Millisecond))
	require.Equal(t, 1, logs.count("the database did not answer in time: the connection counts as dead; reconnecting"))
	ids := first()
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i], "first deliveries in order: %v", ids)
	}
	require.LessOrEqual(t, len(b.h.ids()), 11, "at most the record in flight delivered again: %v", b.h.ids())
}

// timedCollector records when each call of its handler began, for one instance.
type timedCollector struct {
	mu    sync.Mutex
	calls []time.Time
	ids   []int64
	took  time.Duration
}

func (c *timedCollector) Handle(ctx context.Context, rec *handlers.Record[event]) error {
	c.mu.Lock()
	c.calls = append(c.calls, time.Now())
	c.mu.Unlock()
	select {
	case <-time.After(c.took): // the sink's answer time
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	c.ids = append(c.ids, rec.Value.ID)
	c.mu.Unlock()
	return nil
}

func (c *timedCollector) snapshot() ([]time.Time, []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.calls...), append([]int64(nil), c.ids...)
}

// TestTheLeaseDecidesForABusyOwnerCutOff cuts an owner off from the database in the middle of a batch
// (checkpoint per batch: its transaction holds the cursor row, idle on the server) and for good: a
// standby with a direct connection delivers within the lease, not at the idle-in-transaction timeout
// (60s here), and the owner starts no record once its lease may have run out.
func TestTheLeaseDecidesForABusyOwnerCutOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 300)
	proxy, cc := b.through(t)
	const lease = 3 * time.Second

	owner, standby := &timedCollector{took: 10 * time.Millisecond}, &timedCollector{took: 10 * time.Millisecond}
	cfgFor := func(name string, cc *pgx.ConnConfig, h *timedCollector) processor.Config[event] {
		cfg := b.cfg
		cfg.ClientConfig.ConnConfig, cfg.ClientConfig.Instance, cfg.Handler = cc, name, h
		cfg.Checkpoint, cfg.BatchSize, cfg.Lease = processor.CheckpointBatch, 300, lease
		cfg.ClientConfig.DatabaseTimeout, cfg.ProbeInterval = time.Second, -1
		return cfg
	}
	start(t, cfgFor("owner", cc, owner))
	waitFor(t, "the owner to deliver", func() bool { calls, _ := owner.snapshot(); return len(calls) >= 20 })
	start(t, cfgFor("standby", b.cfg.ClientConfig.ConnConfig, standby))
	// Cut off for good, new connections too: only the standby can take over.
	proxy.SwallowNew(true)
	proxy.Swallow()
	cut := time.Now()

	require.Eventually(t, func() bool { calls, _ := standby.snapshot(); return len(calls) > 0 },
		lease+5*time.Second, 10*time.Millisecond, "the standby delivers within the lease")
	took, _ := standby.snapshot()
	t.Logf("the standby delivered %s after the cut", took[0].Sub(cut).Round(time.Millisecond))
	require.Less(t, took[0].Sub(cut), lease+2*time.Second, "the standby took over within the lease and a margin")

	waitFor(t, "every row", func() bool { _, ids := standby.snapshot(); return len(ids) > 0 && ids[len(ids)-1] == 300 })
	ownerCalls, ownerIDs := owner.snapshot()
	require.Less(t, ownerCalls[len(ownerCalls)-1], took[0], "the owner started no record once the standby had begun")
	_, standbyIDs := standby.snapshot()
	// First deliveries, in order: what the owner delivered, then the standby from its durable position.
	seen := map[int64]bool{}
	var first []int64
	for _, id := range append(ownerIDs, standbyIDs...) {
		if !seen[id] {
			seen[id] = true
			first = append(first, id)
		}
	}
	require.Len(t, first, 300, "every row delivered")
	for i := 1; i < len(first); i++ {
		require.Less(t, first[i-1], first[i], "first deliveries in order")
	}
}

// TestARowHeldForAMomentIsNotATakeover holds the cursor row again and again for a moment from another
// session, as an operator's action or a standby's look does, while the owner commits a position per
// record: the owner goes on, and never says that another instance took the process.
func TestARowHeldForAMomentIsNotATakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logBuffer{}
	cfg := b.cfg
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	cfg.Handler = handlers.HandlerFunc[event](func(ctx context.Context, rec *handlers.Record[event]) error {
		return b.h.Handle(ctx, rec)
	})
	start(t, cfg)
	b.insert(t, 1)
	waitFor(t, "the owner to run", func() bool { return b.h.count() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan int, 1)
	go func() {
		n := 0
		defer func() { held <- n }()
		for ctx.Err() == nil {
			tx, err := b.db.Pool.Begin(ctx)
			if err != nil {
				return
			}
			var name string
			if tx.QueryRow(ctx, "SELECT process_name FROM inorder.cursor WHERE process_name = $1 FOR UPDATE",
				cfg.Process).Scan(&name) == nil {
				n++
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
			}
			_ = tx.Rollback(context.Background())
		}
	}()
	b.insert(t, 200)
	waitFor(t, "every record", func() bool { return b.h.count() == 201 })
	cancel()
	require.Positive(t, <-held, "the row was held")
	require.Zero(t, logs.count("taken by another instance"), "no takeover was told")
	require.Zero(t, logs.count("standing by"))
}

// TestAStartUpThatNeverAnswersIsGivenUp cuts a processor off, new connections too (a path that accepts TCP
// but never answers the server's start-up): each reconnect is given up after the database timeout and
// said so, and once the path heals the stream goes on by itself.
func TestAStartUpThatNeverAnswersIsGivenUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, cc := b.through(t)
	logs := &logBuffer{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.ClientConfig.DatabaseTimeout, cfg.ProbeInterval = cc, time.Second, -1
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	start(t, cfg)
	b.insert(t, 3)
	waitFor(t, "the first rows", func() bool { return b.h.count() == 3 })

	proxy.SwallowNew(true)
	proxy.Swallow()
	// The statement in flight, then two start-ups, each given up after the timeout (1s) and a backoff.
	require.Eventually(t, func() bool { return logs.count(`"message":"reconnect failed"`) >= 2 }, 10*time.Second,
		10*time.Millisecond, "reconnects given up")
	require.Positive(t, logs.count("timeout"), "the reconnects failed on the timeout")
	proxy.Heal()
	b.insert(t, 3)
	// The cut may fall on the commit of the record just delivered, which is then delivered again: count
	// the records, not the deliveries.
	waitFor(t, "the rows written while cut off", func() bool {
		seen := map[int64]bool{}
		for _, id := range b.h.ids() {
			seen[id] = true
		}
		return len(seen) == 6
	})
}

// slowSender is an AsyncHandler whose sink takes long to accept one record (slowID) and fails another
// (failID) the first time it settles: it records what went through, in order.
type slowSender struct {
	slowID, failID int64
	mu             sync.Mutex
	failed         bool
	through        []int64
}

type settled struct {
	s   *slowSender
	id  int64
	err error
}

func (r settled) Wait(context.Context) error {
	if r.err == nil {
		r.s.mu.Lock()
		r.s.through = append(r.s.through, r.id)
		r.s.mu.Unlock()
	}
	return r.err
}

func (s *slowSender) MaxInFlight() int { return 4 }

func (s *slowSender) Handle(context.Context, *handlers.Record[event]) error {
	panic("sent through Send")
}

func (s *slowSender) Send(_ context.Context, rec *handlers.Record[event]) (handlers.Result, error) {
	if rec.Value.ID == s.slowID {
		time.Sleep(1200 * time.Millisecond) // the sink is slow to take it: a third of the lease passes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.Value.ID == s.failID && !s.failed {
		s.failed = true
		return settled{s: s, id: rec.Value.ID, err: errTest}, nil
	}
	return settled{s: s, id: rec.Value.ID}, nil
}

func (s *slowSender) ids() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.through...)
}

// TestARenewalAmidAsyncSendsSkipsNothing renews the lease in the middle of an AsyncHandler's batch (the
// sink took a third of it to accept a record) while the record before that one has failed: the renewal
// settles what is in flight, meets the failure there, and the stream halts on it, never moving past it
// until it has gone through.
func TestARenewalAmidAsyncSendsSkipsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 6)
	h := &slowSender{failID: ids[0], slowID: ids[1]}
	cfg := b.cfg
	cfg.Handler, cfg.Lease, cfg.HandlerTimeout = h, 3*time.Second, 500*time.Millisecond
	start(t, cfg)
	waitFor(t, "the position at the last record", func() bool {
		_, id := b.position(t, cfg.Process)
		return id == idText(ids[5])
	})
	// A record the sink accepted while the one before it failed is waited out, not counted, and sent again
	// after it: what matters is that the failed record went through before the position passed it.
	require.Contains(t, h.ids(), ids[0], "the failed record was sent again and went through")
	for _, id := range ids {
		require.Contains(t, h.ids(), id)
	}
}

// commitCounter counts the commits that moved the position (Observer.Position).
type commitCounter struct {
	nopObserver
	n atomic.Int64
}

func (c *commitCounter) Position(string, time.Time) { c.n.Add(1) }

// TestAKeyedWindowGoesOnDuringACommitsRoundTrip delivers a hundred records of one key through a keyed
// window, one at a time as their key requires, with a per-record position over a link of 40 ms round trips:
// while the commit of one advance is on its way the window takes the next records' results and starts what
// follows, so that one commit makes many records durable, rather than each record waiting for the commit
// of the one before it.
func TestAKeyedWindowGoesOnDuringACommitsRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, err := tcpproxy.Start(tcpproxy.Config{Target: b.cfg.ClientConfig.ConnConfig.Host + ":" +
		strconv.Itoa(int(b.cfg.ClientConfig.ConnConfig.Port)), Delay: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	cc, err := pgx.ParseConfig(proxy.URL(b.db.URL))
	require.NoError(t, err)
	const n = 100
	ids := b.insert(t, n) // one key
	commits := &commitCounter{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.Observer = cc, commits
	cfg.Source.KeyColumn = "aggregate_id"
	cfg.MaxInFlight, cfg.BatchSize, cfg.Checkpoint = 64, 200, processor.CheckpointRecord
	start(t, cfg)
	waitFor(t, "every record", func() bool { return b.h.count() == n })
	require.Equal(t, ids, b.h.ids())
	waitFor(t, "the position at the last record", func() bool {
		_, id := b.position(t, cfg.Process)
		return id == strconv.FormatInt(ids[n-1], 10)
	})
	t.Logf("%d records of one key made durable in %d commits", n, commits.n.Load())
	require.Less(t, commits.n.Load(), int64(n/2), "records are taken and started during a commit's round trip")
}
