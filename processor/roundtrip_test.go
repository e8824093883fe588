package processor_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/processor"
)

// exchangeCounter notes, at each batch that read records, how many round trips the proxy had counted.
type exchangeCounter struct {
	nopObserver
	proxy    *tcpproxy.Proxy
	instance string

	mu       sync.Mutex
	records  []int   // records read by each batch
	at       []int64 // exchanges counted when each batch had read its records, but for prepares
	prepared []int64 // statements prepared by then
}

func (o *exchangeCounter) Batch(_ string, n int) {
	if n == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.records = append(o.records, n)
	// The session's (it holds the ownership lock, and is asked now and then whether it is still there)
	// are not the batches', nor are the pool's health checks of a connection that sat idle for a second
	// (which a loaded machine makes more of). Statements prepared are counted apart.
	session := "inorder-session:@" + o.instance
	o.at = append(o.at, o.proxy.Exchanges()-o.proxy.ExchangesOf(session)-(o.proxy.Pings()-o.proxy.PingsOf(session))-
		(o.proxy.Prepares()-o.proxy.PreparesOf(session)))
	o.prepared = append(o.prepared, o.proxy.Prepares()-o.proxy.PreparesOf(session))
}

func (o *exchangeCounter) batches() ([]int, []int64, []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.records...), append([]int64(nil), o.at...), append([]int64(nil), o.prepared...)
}

// TestABatchCostsTwoRoundTrips counts, at a proxy between the processor and Postgres, the round trips of
// a backlog's batches in steady state: with a checkpoint per batch, the position's commit travels with the
// next batch's lock and poll, and the read is the second; with a checkpoint per record, one per record
// and the read. A statement is prepared once per connection, in a round trip of its own: they are counted
// apart, and bounded by the checkpoint tables taking turns during the run (a slow run sees a turn of
// the rotation, and the first append into the next table prepares its statement).
func TestABatchCostsTwoRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		checkpoint processor.Checkpoint
		perBatch   func(records int) int64
	}{
		{processor.CheckpointBatch, func(int) int64 { return 2 }},
		{processor.CheckpointRecord, func(records int) int64 { return int64(records) + 1 }},
	} {
		t.Run(string(tc.checkpoint), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rows := 1000
			if tc.checkpoint == processor.CheckpointBatch {
				rows = 3000
			}
			b.insert(t, rows)
			proxy, err := tcpproxy.Start(tcpproxy.Config{Target: b.cfg.ClientConfig.ConnConfig.Host + ":" + itoa(int(b.cfg.ClientConfig.ConnConfig.Port))})
			require.NoError(t, err)
			t.Cleanup(func() { _ = proxy.Close() })
			cc, err := pgx.ParseConfig(proxy.URL(b.db.URL))
			require.NoError(t, err)
			obs := &exchangeCounter{proxy: proxy, instance: "roundtrips"}
			cfg := b.cfg
			cfg.ClientConfig.ConnConfig, cfg.Observer, cfg.Checkpoint, cfg.ClientConfig.Instance = cc, obs, tc.checkpoint, obs.instance
			cfg.BatchSize = 100
			cfg.ProbeInterval = -1 // no probes between batches
			start(t, cfg)
			waitFor(t, "every record", func() bool { return b.h.count() == rows })

			records, at, prepared := obs.batches()
			require.Len(t, records, rows/cfg.BatchSize, "full batches: %v", records)
			// From the end of the second batch's read to the end of the last one's: what the batches in
			// between cost, each from its predecessor's delivery to its own read. (The first batch's end
			// prepares the statements that commit and lock again: once per connection.)
			var want int64
			for _, n := range records[1 : len(records)-1] {
				want += tc.perBatch(n)
			}
			got := at[len(at)-1] - at[1]
			require.LessOrEqual(t, got, want, "round trips over %d batches of %d", len(records)-2, cfg.BatchSize)
			require.LessOrEqual(t, prepared[len(prepared)-1]-prepared[1], int64(store.CheckpointTables-1),
				"statements prepared in steady state: the appends into the other checkpoint tables at most")
			t.Logf("%s: %.2f round trips per batch of %d", tc.checkpoint, float64(got)/float64(len(records)-2), cfg.BatchSize)
		})
	}
}

func itoa(n int) string { return idText(int64(n)) }
