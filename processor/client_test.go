package processor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// connWatch samples, until the test ends, how many sessions each instance has open (by the suffix
// "@<instance>" of their application_name), and keeps the most seen.
type connWatch struct {
	most sync.Map // instance -> *atomic.Int64
	seen atomic.Int64
}

func watchConns(t *testing.T, b *bundle, instances ...string) *connWatch {
	t.Helper()
	w := &connWatch{}
	for _, in := range instances {
		w.most.Store(in, &atomic.Int64{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, in := range instances {
				var n int64
				if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE application_name LIKE 'inorder%@' || $1 AND datname = current_database()`, in).Scan(&n); err != nil {
					continue
				}
				m, _ := w.most.Load(in)
				if most := m.(*atomic.Int64); n > most.Load() {
					most.Store(n)
				}
			}
			w.seen.Add(1)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *connWatch) max(instance string) int64 {
	m, _ := w.most.Load(instance)
	return m.(*atomic.Int64).Load()
}

// A Client runs many processes of one instance on a few connections, owning or standing by: two instances
// of twelve processes each, rows written throughout, and one instance stopped halfway so that the other
// takes its processes over. Every record reaches each process's handler once and in order, and neither
// instance ever holds more connections than its MaxConns.
func TestClientRunsManyProcessesOnFewConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const processes, maxConns = 12, 3
	watch := watchConns(t, b, "one", "two")

	collectors := make([]*collector, processes)
	for i := range collectors {
		collectors[i] = newCollector()
	}
	runInstance := func(instance string) (stop func() error) {
		client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, MaxConns: maxConns, Instance: instance})
		require.NoError(t, err)
		for i := range processes {
			cfg := b.cfg
			cfg.ClientConfig.ConnConfig = nil // the client's
			cfg.Client = client
			cfg.Process = fmt.Sprintf("shared_%02d", i)
			cfg.Handler = collectors[i]
			cfg.Logger = cfg.Logger.With().Str("instance", instance).Logger()
			p, err := processor.New(cfg)
			require.NoError(t, err)
			client.Add(p)
		}
		stopRun := testrun.Start(t, client.Run)
		return func() error {
			err := stopRun()
			client.Close()
			return err
		}
	}
	stopOne := runInstance("one")
	stopTwo := runInstance("two")

	var want []int64
	for round := range 6 {
		want = append(want, b.insert(t, 25)...)
		if round == 3 {
			waitFor(t, "every process to catch up before the stop", func() bool {
				for _, c := range collectors {
					if c.count() < len(want) {
						return false
					}
				}
				return true
			})
			require.NoError(t, stopOne(), "a clean stop gives the processes of instance one up")
		}
	}
	for i, c := range collectors {
		waitFor(t, fmt.Sprintf("process %d to deliver every record", i), func() bool { return c.count() >= len(want) })
		require.Equal(t, want, c.ids(), "process %d: every record once, in order", i)
	}
	require.NoError(t, stopTwo())
	require.Positive(t, watch.seen.Load())
	require.LessOrEqual(t, watch.max("one"), int64(maxConns), "instance one's connections")
	require.LessOrEqual(t, watch.max("two"), int64(maxConns), "instance two's connections")
	require.Positive(t, watch.max("two"))
}

// A processor on a Client takes the client's database and instance; another is refused at New.
func TestClientRefusesAnotherInstance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, Instance: "one"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	cfg := b.cfg
	cfg.Client, cfg.ClientConfig.Instance = client, "two"
	_, err = processor.New(cfg)
	require.ErrorContains(t, err, `Config.Instance "two" differs from its Client's instance "one"`)

	_, err = processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, MaxConns: 1})
	require.ErrorContains(t, err, "MaxConns must be at least 2")
}

// The processors of a Client that listen for insert notifications share one listening connection: rows
// inserted while they idle (with a poll interval of an hour) wake both, and a listener cut off is replaced
// for both.
func TestClientProcessesShareOneListener(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createNotifyTrigger(t, b)
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig, Instance: "listening"})
	require.NoError(t, err)
	var logs logBuffer
	collectors := []*collector{newCollector(), newCollector()}
	for i, h := range collectors {
		cfg := b.cfg
		cfg.Client, cfg.Listen, cfg.Handler = client, true, h
		cfg.Process = fmt.Sprintf("listener_%d", i)
		cfg.PollInterval = time.Hour // only a notification can make it look again within the test
		cfg.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
		p, err := processor.New(cfg)
		require.NoError(t, err)
		client.Add(p)
	}
	stop := testrun.Start(t, client.Run)
	t.Cleanup(func() { _ = stop(); client.Close() })
	waitFor(t, "both listening", func() bool { return logs.count("listening for insert notifications") == 2 })
	var listeners int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name LIKE 'inorder-listen:%' AND datname = current_database()`).Scan(&listeners))
	require.Equal(t, 1, listeners, "one listening connection for the client")

	want := b.insert(t, 3)
	for i, h := range collectors {
		waitFor(t, fmt.Sprintf("process %d woken", i), func() bool { return h.count() == 3 })
	}
	var killed bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'inorder-listen:@listening' AND datname = current_database()`).Scan(&killed))
	require.True(t, killed)
	waitFor(t, "a new listener for both", func() bool { return logs.count("listening for insert notifications") == 4 })
	want = append(want, b.insert(t, 2)...)
	for i, h := range collectors {
		waitFor(t, fmt.Sprintf("process %d woken again", i), func() bool { return h.count() == 5 })
		require.Equal(t, want, h.ids())
	}
	require.Zero(t, logs.count("no insert-notification trigger"))
}
