package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// ownership reads how many processes each instance owns under a running lease, and each process's
// epoch (which grows by one at every change of owner).
func ownership(t *testing.T, b *bundle) (owned map[string]int, epochs map[string]int64) {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT process_name, owner_epoch,
		CASE WHEN lease_expires_at > clock_timestamp() THEN owner_instance END FROM inorder.cursor`)
	require.NoError(t, err)
	defer rows.Close()
	owned, epochs = map[string]int{}, map[string]int64{}
	for rows.Next() {
		var process string
		var epoch int64
		var owner *string
		require.NoError(t, rows.Scan(&process, &epoch, &owner))
		epochs[process] = epoch
		if owner != nil {
			owned[*owner]++
		}
	}
	require.NoError(t, rows.Err())
	return owned, epochs
}

// A fleet shares the work: three instances of six processes replaced one after another, as a rolling
// restart does, with rows written throughout. Within two leases of the last start every instance owns
// between floor(P/I)-1 and ceil(P/I)+1 processes, and then exactly its share (before, the last one owned
// none and stood by for all); the owners then stay put for a further lease; and every record reaches each process once and in order
// (handovers are clean: nothing is delivered again).
func TestAFleetSharesTheWorkAfterARollingRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const processes, instances = 6, 3
	const lease = 2 * time.Second
	collectors := make([]*collector, processes)
	for i := range collectors {
		collectors[i] = newCollector()
	}
	start := func(instance string) (stop func() error) {
		client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, Instance: instance})
		require.NoError(t, err)
		for i := range processes {
			cfg := b.cfg
			cfg.ClientConfig.ConnConfig, cfg.Client = nil, client
			cfg.Process = fmt.Sprintf("fleet_%d", i)
			cfg.Handler = collectors[i]
			cfg.Lease = lease
			cfg.Logger = cfg.Logger.With().Str("instance", instance).Logger()
			p, err := processor.New(cfg)
			require.NoError(t, err)
			client.Add(p)
		}
		stopRun := testrun.Start(t, client.Run)
		// Ready, as a rolling restart waits for: the instance says it runs every process.
		waitFor(t, instance+" to run every process", func() bool {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inorder.instance
				WHERE instance = $1 AND seen_until > clock_timestamp()`, instance).Scan(&n))
			return n == processes
		})
		return func() error {
			err := stopRun()
			client.Close()
			return err
		}
	}

	// Rows flow throughout: through the takeovers of the restart and the handovers after it.
	ctx, stopWriting := context.WithCancel(context.Background())
	var wrote sync.WaitGroup
	var want []int64
	var writeErr error
	wrote.Add(1)
	go func() {
		defer wrote.Done()
		for ctx.Err() == nil {
			var id int64
			// Not cancelled by the stop: a row that commits is a row to deliver.
			if writeErr = b.db.Pool.QueryRow(context.Background(),
				`INSERT INTO events (aggregate_id, seq) VALUES ('a', 0) RETURNING id`).Scan(&id); writeErr != nil {
				return
			}
			want = append(want, id)
			time.Sleep(5 * time.Millisecond) // the pace of the writes, not a wait for anything
		}
	}()

	old := []func() error{start("old-0"), start("old-1"), start("old-2")}
	var last time.Time
	for i, stop := range old {
		require.NoError(t, stop(), "a clean stop of old-%d", i)
		start(fmt.Sprintf("new-%d", i))
		last = time.Now()
	}

	low, high := processes/instances-1, (processes+instances-1)/instances+1
	within := func(lo, hi int) func() bool {
		return func() bool {
			owned, _ := ownership(t, b)
			for i := range instances {
				if n := owned[fmt.Sprintf("new-%d", i)]; n < lo || n > hi {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "every instance to own its share, give or take one", within(low, high))
	shared := time.Since(last)
	// The rule's resting point, for instances that run the same processes: none owns more than the share
	// while another owns fewer, here two each.
	waitFor(t, "every instance to own its share", within(processes/instances, processes/instances))
	settled := time.Since(last)
	t.Logf("every instance owned between %d and %d processes %s after the last start, exactly its share %s after",
		low, high, shared, settled)
	require.Less(t, shared, 2*lease, "within two leases of the last start")
	require.Less(t, settled, 2*lease, "settled within two leases of the last start")

	// No flapping: the owners stay put for a further lease (an epoch grows at every change of owner).
	owned, epochs := ownership(t, b)
	time.Sleep(lease) // an observation window: nothing is awaited, every change within it is counted
	ownedAfter, epochsAfter := ownership(t, b)
	require.Equal(t, epochs, epochsAfter, "no process changed owner in the lease after the work was shared")
	require.Equal(t, owned, ownedAfter)

	stopWriting()
	wrote.Wait()
	require.NoError(t, writeErr)
	require.NotEmpty(t, want)
	for i, c := range collectors {
		waitFor(t, fmt.Sprintf("fleet_%d to deliver every record", i), func() bool { return c.count() >= len(want) })
		require.Equal(t, want, c.ids(), "fleet_%d: every record once, in order", i)
	}
}
