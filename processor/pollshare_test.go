package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/processor"
)

// pollCounter counts, as pgx's tracer of a Client's connections, the polls of the transactions in flight:
// the statements that read pg_locks for a batch's horizon.
type pollCounter struct{ n atomic.Int64 }

func (c *pollCounter) count(sql string) {
	if strings.Contains(sql, "FROM pg_locks") && strings.Contains(sql, "'RowExclusiveLock'") {
		c.n.Add(1)
	}
}

func (c *pollCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *pollCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pollCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *pollCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}

func (c *pollCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestProcessesOverOneSourceTakeEachOthersPolls: twenty quiet processes over one table on one Client, woken
// at once by one new row, poll the transactions in flight a few times between them, not each for itself:
// the first to lock its cursor row polls, and the others take its poll, which was sent after the row woke
// them (see pollshare.go). Each delivers the row. They are woken by the insert notification, at one
// instant, so that what is counted is the sharing, not how the probe's answers fell.
func TestProcessesOverOneSourceTakeEachOthersPolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createNotifyTrigger(t, b)
	polls := &pollCounter{}
	cc := b.cfg.ClientConfig.ConnConfig.Copy()
	cc.Tracer = polls
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, Instance: "shared"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	const n = 20
	var hs []*collector
	var logs logBuffer
	for i := range n {
		cfg := b.cfg
		cfg.Process, cfg.Client, cfg.ClientConfig = fmt.Sprintf("tenant_%02d", i), client, processor.ClientConfig{}
		cfg.Listen, cfg.ProbeInterval, cfg.PollInterval = true, -1, time.Hour // only the notification wakes them
		cfg.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
		h := newCollector()
		cfg.Handler = h
		hs = append(hs, h)
		start(t, cfg)
	}
	waitFor(t, "every process listening", func() bool { return logs.count("listening for insert notifications") == n })
	ctx := context.Background()
	waitFor(t, "every process owned", func() bool {
		var owned int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inorder.cursor
			WHERE owner_instance = 'shared' AND lease_expires_at > clock_timestamp()`).Scan(&owned))
		return owned == n
	})
	before := polls.n.Load()
	row := b.insert(t, 1)
	for _, h := range hs {
		waitFor(t, "every process delivered the row", func() bool { return h.count() == 1 })
		require.Equal(t, row, h.ids())
	}
	made := polls.n.Load() - before
	t.Logf("%d processes woken by one row polled the transactions in flight %d times", n, made)
	require.Less(t, made, int64(n/2), "the processes take each other's polls")
}
