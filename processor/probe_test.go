package processor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/processor"
)

// batchCounter is an observer that counts batches.
type batchCounter struct {
	processor.Observer
	batches atomic.Int64
}

func (c *batchCounter) Batch(string, int) { c.batches.Add(1) }

// TestAProbeDeliversARowAfterALongIdleWithoutAWholePollInterval: with a poll interval of a minute, a
// row committed after the stream has been idle for a while is delivered within seconds, since the probe
// saw it.
func TestAProbeDeliversARowAfterALongIdleWithoutAWholePollInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.PollInterval = time.Minute
	b.cfg.ProbeInterval = 20 * time.Millisecond
	first := b.insert(t, 1)
	start(t, b.cfg)
	waitFor(t, "the first row", func() bool { return b.h.count() == 1 })
	waitFor(t, "the position durable", func() bool {
		_, id := b.position(t, b.cfg.Process)
		return id == idText(first[0])
	})
	time.Sleep(300 * time.Millisecond) // idle for a while: the probe has backed off to its interval
	second := b.insert(t, 1)
	require.Eventually(t, func() bool { return b.h.count() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the row after the idle period, well within the minute-long poll interval")
	require.Equal(t, append(first, second...), b.h.ids())
}

// TestTheProbeNeverLetsARowThroughThatTheHorizonHolds: an open writer holds the horizon; rows committed
// after it make the probe answer yes, and the processor runs batches, but reads nothing past the open
// writer's row until it commits.
func TestTheProbeNeverLetsARowThroughThatTheHorizonHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.PollInterval = 300 * time.Millisecond
	b.cfg.ProbeInterval = 5 * time.Millisecond
	counter := &batchCounter{Observer: nopObserver{}}
	b.cfg.Observer = counter
	before := b.insert(t, 2)
	start(t, b.cfg)
	waitFor(t, "the rows before the writer", func() bool { return b.h.count() == 2 })

	ctx := context.Background()
	slow, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx) //nolint:errcheck
	var slowID int64
	require.NoError(t, slow.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('slow', 1) RETURNING id").Scan(&slowID))
	after := b.insert(t, 3) // committed, and seen by the probe
	seen := counter.batches.Load()
	waitFor(t, "batches run while the writer is open", func() bool {
		return counter.batches.Load() >= seen+5 || b.h.count() > len(before)
	})
	require.Equal(t, before, b.h.ids(), "nothing after the open writer's row is read while it is open")

	require.NoError(t, slow.Commit(ctx))
	want := append(append(append([]int64{}, before...), slowID), after...)
	waitFor(t, "everything once the writer committed", func() bool { return b.h.count() == len(want) })
	require.Equal(t, want, b.h.ids())
}

// TestAProbeThatLosesItsConnectionFallsBackAndRecovers ends every connection of the processor (its
// session, and the connection on which its batches and its probe take turns) while the processor idles on
// the probe: the processor falls back to its poll interval, the next batch reconnects, a row committed
// afterwards is delivered, and the probe works again.
func TestAProbeThatLosesItsConnectionFallsBackAndRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.PollInterval = 200 * time.Millisecond
	first := b.insert(t, 1)
	start(t, b.cfg)
	waitFor(t, "the first row", func() bool { return b.h.count() == 1 })
	// Its position durable, so that the cut cannot fall on its commit (a lost commit delivers it again,
	// as it must, which is not what this test is about).
	waitFor(t, "the first row's position", func() bool {
		_, id := b.position(t, b.cfg.Process)
		return id == idText(first[0])
	})
	ctx := context.Background()
	sessions := func(name string) int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name LIKE $1 AND datname = current_database()`, name).Scan(&n))
		return n
	}
	waitFor(t, "the processor's connections", func() bool { return sessions("inorder%") == 2 })
	var cut int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name LIKE 'inorder%' AND datname = current_database()`).Scan(&cut))
	require.Equal(t, 2, cut, "the processor's session and the connection it and the probe work on ended")
	second := b.insert(t, 1)
	waitFor(t, "the row after the reconnection", func() bool { return b.h.count() == 2 })
	require.Equal(t, append(first, second...), b.h.ids())
	third := b.insert(t, 1)
	waitFor(t, "a row found by the probe again", func() bool { return b.h.count() == 3 })
	require.Equal(t, append(append(first, second...), third...), b.h.ids())
	waitFor(t, "connected again: the session, and one to work on", func() bool { return sessions("inorder%") == 2 })
}

// TestWhatProcessorsShareIsTheirClient: the one thing processors of one Go process share is the Client
// they were given. Three processes without a Client each run on one of their own (a session, and one
// connection on which its batches and its probe take turns); three on one Client share its. No store, and
// no connection, is shared behind the callers' backs.
func TestWhatProcessorsShareIsTheirClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows := b.insert(t, 2)
	ctx := context.Background()
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, Instance: "client"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	var recs []*collector
	for _, name := range []string{"alone_a", "alone_b", "alone_c", "client_a", "client_b", "client_c"} {
		cfg := b.cfg
		cfg.Process = name
		if strings.HasPrefix(name, "client") {
			cfg.Client = client
		}
		h := newCollector()
		cfg.Handler = h
		recs = append(recs, h)
		start(t, cfg)
	}
	for _, h := range recs {
		waitFor(t, "every process delivered the rows", func() bool { return h.count() == len(rows) })
	}
	var sessions int
	waitFor(t, "a session per Client: three of their own, one shared", func() bool {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'inorder-session:@%'`).Scan(&sessions))
		return sessions == 4
	})
	more := b.insert(t, 1)
	for _, h := range recs {
		waitFor(t, "every process delivered the new row", func() bool { return h.count() == len(rows)+1 })
		require.Equal(t, append(append([]int64{}, rows...), more...), h.ids())
	}
}

// nopObserver is told everything and keeps nothing: a test's observer embeds it and overrides what it
// counts.
type nopObserver struct{}

func (nopObserver) Batch(string, int)                    {}
func (nopObserver) PassedOver(string)                    {}
func (nopObserver) SourceWaiting(string, string, bool)   {}
func (nopObserver) Handled(string, time.Duration, error) {}
func (nopObserver) InFlight(string, int, time.Duration)  {}
func (nopObserver) Resent(string, int)                   {}
func (nopObserver) Retrying(string, bool)                {}
func (nopObserver) Halted(string, bool)                  {}
func (nopObserver) SinkUnavailable(string, bool)         {}
func (nopObserver) Position(string, time.Time)           {}
func (nopObserver) Locked(string, bool)                  {}
func (nopObserver) Hold(string, time.Duration)           {}
func (nopObserver) Connected(string, bool)               {}
func (nopObserver) CredentialsRefused(string, string)    {}
