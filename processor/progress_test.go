package processor_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// A batch of big rows read on a slow link: bigRows rows of bigRowSize bytes each, all in one read, which
// the link passes at linkRate bytes a second (3s in all), three times the database timeout.
const (
	bigRows, bigRowSize = 3, 2_000_000
	linkRate            = 2_000_000
	slowLinkTimeout     = time.Second
)

// The lines a processor says when it gives up its connection.
const (
	deadLine      = "the database did not answer in time: the connection counts as dead; reconnecting"
	reconnectLine = "reconnecting"
)

const blobsDDL = `
	CREATE TABLE blobs (
		id         bigserial PRIMARY KEY,
		body       text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX blobs_created_at_id_idx ON blobs (created_at, id);
	INSERT INTO blobs (body) SELECT repeat(chr(96 + g), 2000000) FROM generate_series(1, 3) g;`

// blob is a row of blobs.
type blob struct {
	ID   int64  `db:"id"`
	Body string `db:"body"`
}

// blobCollector records the records it receives, keeping of each body only whether it came whole.
type blobCollector struct {
	mu    sync.Mutex
	ids   []int64
	whole []bool
}

func (c *blobCollector) Handle(_ context.Context, rec *handlers.Record[blob]) error {
	want := strings.Repeat(string(rune(96+rec.Value.ID)), bigRowSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, rec.Value.ID)
	c.whole = append(c.whole, rec.Value.Body == want)
	return nil
}

func (c *blobCollector) snapshot() ([]int64, []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.ids...), append([]bool(nil), c.whole...)
}

// slowLink starts a proxy in front of b's database that passes linkRate bytes a second toward the
// client, and returns it with a processor configuration of blobs through it: the database timeout is
// slowLinkTimeout, the probe is off, and the logs go to logs as well.
func slowLink(t *testing.T, b *bundle, logs *logBuffer, h *blobCollector) (*tcpproxy.Proxy, processor.Config[blob]) {
	t.Helper()
	b.db.Exec(t, blobsDDL)
	pgtest.AddClock(t, b.db, "blobs") // its rows are older than the clock: ordered by created_at
	proxy, cc := b.through(t)
	proxy.Trickle(linkRate)
	return proxy, processor.Config[blob]{
		StartFrom:     inordertype.StartFromBeginning,
		Process:       "big_rows",
		ClientConfig:  processor.ClientConfig{ConnConfig: cc, DatabaseTimeout: slowLinkTimeout},
		Source:        inordertype.Source{Table: "blobs", Columns: []string{"id", "body"}},
		Handler:       h,
		BatchSize:     10,
		PollInterval:  20 * time.Millisecond,
		ProbeInterval: -1,
		Logger:        zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel),
	}
}

// TestABatchOfBigRowsOnASlowLinkIsNotCutOff reads a batch of big rows that takes three database timeouts
// to come through a slow link, on a dedicated connection and on the connections of a Client: its bytes
// keep coming, so the read goes on, every record is delivered once and in order, and the processor never
// says the database did not answer nor reconnects.
func TestABatchOfBigRowsOnASlowLinkIsNotCutOff(t *testing.T) {
	t.Parallel()
	for _, client := range []bool{false, true} {
		name := "dedicated connection"
		if client {
			name = "client's connections"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			logs, h := &logBuffer{}, &blobCollector{}
			_, cfg := slowLink(t, b, logs, h)
			run := func(ctx context.Context) error {
				p, err := processor.New(cfg)
				if err != nil {
					return err
				}
				return p.Run(ctx)
			}
			if client {
				c, err := processor.NewClient(processor.ClientConfig{ConnConfig: cfg.ClientConfig.ConnConfig,
					DatabaseTimeout: slowLinkTimeout, Instance: "slow"})
				require.NoError(t, err)
				t.Cleanup(c.Close)
				cfg.ClientConfig.ConnConfig, cfg.Client = nil, c
				p, err := processor.New(cfg)
				require.NoError(t, err)
				c.Add(p)
				run = c.Run
			}
			began := time.Now()
			testrun.Start(t, run)
			waitFor(t, "every record, or a reconnect", func() bool {
				ids, _ := h.snapshot()
				return len(ids) == bigRows || logs.count(reconnectLine) > 0
			})
			t.Logf("%d records of %d bytes delivered %s after the start", bigRows, bigRowSize,
				time.Since(began).Round(time.Millisecond))
			require.Zero(t, logs.count(deadLine), "a read still receiving bytes was taken for a dead database")
			require.Zero(t, logs.count(reconnectLine), "the processor reconnected")
			ids, whole := h.snapshot()
			require.Equal(t, []int64{1, 2, 3}, ids, "every record once, in order")
			require.Equal(t, []bool{true, true, true}, whole, "every body whole")
			require.Greater(t, time.Since(began), 2*slowLinkTimeout, "the read took longer than the timeout")
		})
	}
}

// TestASlowReadThatFallsSilentIsADeadConnection cuts a slow read of big rows off for good in its middle,
// once it has run past the database timeout with its bytes coming: until then the connection is alive;
// once nothing comes, it counts as dead within the timeout (the one line says so), and the records are
// delivered on a new connection, once and in order.
func TestASlowReadThatFallsSilentIsADeadConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs, h := &logBuffer{}, &blobCollector{}
	proxy, cfg := slowLink(t, b, logs, h)
	start(t, cfg)
	// Half the batch through: one and a half timeouts into the read.
	waitFor(t, "half the batch through the link", func() bool { return proxy.ToClients() >= bigRows*bigRowSize/2 })
	require.Zero(t, logs.count(reconnectLine), "a read still receiving bytes was taken for a dead database")
	ids, _ := h.snapshot()
	require.Empty(t, ids, "the read is under way")

	proxy.Swallow()
	cut := time.Now()
	testrun.EventuallyWithin(slowLinkTimeout+10*time.Second)(t, "the connection to count as dead",
		func() bool { return logs.count(deadLine) > 0 })
	t.Logf("the connection counted as dead %s after the cut (timeout %s)", time.Since(cut).Round(time.Millisecond),
		slowLinkTimeout)
	proxy.Trickle(0)
	waitFor(t, "every record", func() bool { ids, _ := h.snapshot(); return len(ids) == bigRows })
	ids, whole := h.snapshot()
	require.Equal(t, []int64{1, 2, 3}, ids, "every record once, in order")
	require.Equal(t, []bool{true, true, true}, whole, "every body whole")
}
