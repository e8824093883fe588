package processor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
)

// projection is a read model of the events: per aggregate, how many events and the last seq, upserted
// one record at a time (HandleTx) or a batch at a time (HandleTxBatch), with one statement either way.
type projection struct {
	table   string
	mu      sync.Mutex
	batches []int          // the size of each batch call
	refuse  map[int64]bool // records whose projection fails
	block   chan struct{}  // when set, the first batch call waits on it
	blocked chan struct{}  // closed when that call waits
}

const projectSQL = `
	INSERT INTO %[1]s (aggregate_id, events, last_seq)
	SELECT a, count(*), (array_agg(s ORDER BY o DESC))[1]
	FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS u(a, s, o) GROUP BY a
	ON CONFLICT (aggregate_id) DO UPDATE SET events = %[1]s.events + excluded.events, last_seq = excluded.last_seq`

func (p *projection) project(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[event]) error {
	aggs := make([]string, len(recs))
	seqs := make([]int32, len(recs))
	for i, r := range recs {
		aggs[i], seqs[i] = r.Value.AggregateID, int32(r.Value.Seq)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(projectSQL, p.table), aggs, seqs); err != nil {
		return err
	}
	// A refusal comes after the writes, as a constraint the statement broke would: they must not stay.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		if p.refuse[r.Value.ID] {
			return handlers.Permanent(fmt.Errorf("record %d does not project", r.Value.ID))
		}
	}
	return nil
}

func (p *projection) HandleTx(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
	return p.project(ctx, tx, []*handlers.Record[event]{rec})
}

func (p *projection) HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[event]) error {
	p.mu.Lock()
	p.batches = append(p.batches, len(recs))
	block, blocked := p.block, p.blocked
	p.block = nil
	p.mu.Unlock()
	if err := p.project(ctx, tx, recs); err != nil {
		return err
	}
	if block != nil {
		close(blocked)
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// oneAtATime hides HandleTxBatch: the same projection, record by record.
type oneAtATime struct{ p *projection }

func (o oneAtATime) HandleTx(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
	return o.p.HandleTx(ctx, tx, rec)
}

var _ handlers.TxBatchHandler[event] = (*projection)(nil)

// readModel returns a projection table's rows as aggregate -> "events/last seq".
func (b *bundle) readModel(t *testing.T, table string) map[string]string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), "SELECT aggregate_id, events || '/' || last_seq FROM "+table)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var a, v string
		require.NoError(t, rows.Scan(&a, &v))
		out[a] = v
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *bundle) projectionTable(t *testing.T, name string) {
	t.Helper()
	b.db.Exec(t, "CREATE TABLE "+name+" (aggregate_id text PRIMARY KEY, events int NOT NULL, last_seq int NOT NULL)")
}

// insertSeqs adds n events over keys, each key's seq counting up from 1, in one statement.
func (b *bundle) insertSeqs(t *testing.T, keys, n int) {
	t.Helper()
	b.db.Exec(t, `INSERT INTO events (aggregate_id, seq) SELECT 'k' || (g % $2), g / $2 + 1 FROM generate_series(0, $1 - 1) g`, n, keys)
}

// TestABatchReadModelEqualsAOneAtATimeOne: the same events projected a batch at a time and a record at a
// time give the same read model, and the batch run calls the handler once per batch.
func TestABatchReadModelEqualsAOneAtATimeOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.projectionTable(t, "rm_batch")
	b.projectionTable(t, "rm_one")
	b.insertSeqs(t, 7, 500)
	batch := &projection{table: "rm_batch"}
	for _, tc := range []struct {
		process string
		h       handlers.TxHandler[event]
		cp      processor.Checkpoint
	}{
		{"batch", batch, processor.CheckpointRecord},
		{"one", oneAtATime{&projection{table: "rm_one"}}, processor.CheckpointBatch},
	} {
		cfg := b.cfg
		cfg.Process, cfg.Handler, cfg.TxHandler, cfg.BatchSize, cfg.Checkpoint = tc.process, nil, tc.h, 100, tc.cp
		start(t, cfg)
	}
	want := map[string]string{}
	for k := range 7 {
		n := 500 / 7
		if k < 500%7 {
			n++
		}
		want[fmt.Sprintf("k%d", k)] = fmt.Sprintf("%d/%d", n, n)
	}
	waitFor(t, "both read models", func() bool {
		return fmt.Sprint(b.readModel(t, "rm_batch")) == fmt.Sprint(want) && fmt.Sprint(b.readModel(t, "rm_one")) == fmt.Sprint(want)
	})
	batch.mu.Lock()
	defer batch.mu.Unlock()
	require.LessOrEqual(t, len(batch.batches), 10, "a handler call per batch of 100, not per record: %v", batch.batches)
	total := 0
	for _, n := range batch.batches {
		total += n
	}
	require.Equal(t, 500, total, "every record went through a batch call, none one at a time: %v", batch.batches)
}

// TestAFailingRecordInABatchHaltsOnIt: the batch fails, is delivered one record at a time, and the stream
// halts on the record that fails, with the records before it projected and nothing after it.
func TestAFailingRecordInABatchHaltsOnIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.projectionTable(t, "rm")
	ids := b.insert(t, 10) // aggregate 'a', seq 1..10
	p := &projection{table: "rm", refuse: map[int64]bool{ids[6]: true}}
	b.cfg.Handler, b.cfg.TxHandler = nil, p
	start(t, b.cfg)
	waitFor(t, "the halt", func() bool { h := b.halt(t); return h != nil && !h.Retrying() })
	require.Equal(t, idText(ids[6]), b.halt(t).RecordID)
	require.Equal(t, map[string]string{"a": "6/6"}, b.readModel(t, "rm"), "the six records before it, nothing after")
	_, pos := b.position(t, b.cfg.Process)
	require.Equal(t, idText(ids[5]), pos)
}

// TestACrashMidBatchLeavesTheReadModelAndThePositionTogether: the processor's session ends while its
// batch handler has written the batch; nothing of it commits, and the next batch projects each event once.
func TestACrashMidBatchLeavesTheReadModelAndThePositionTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.projectionTable(t, "rm")
	b.insertSeqs(t, 3, 60)
	release := make(chan struct{})
	p := &projection{table: "rm", block: release, blocked: make(chan struct{})}
	b.cfg.Handler, b.cfg.TxHandler, b.cfg.BatchSize = nil, p, 25
	start(t, b.cfg)
	<-p.blocked // the first batch is written, not committed
	var killed bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT bool_or(pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name LIKE 'inorder-tx:%' AND datname = current_database()`).Scan(&killed))
	require.True(t, killed)
	close(release) // the handler returns; its transaction is gone
	waitFor(t, "every event projected once", func() bool {
		return fmt.Sprint(b.readModel(t, "rm")) == fmt.Sprint(map[string]string{"k0": "20/20", "k1": "20/20", "k2": "20/20"})
	})
	_, pos := b.position(t, b.cfg.Process)
	var last string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT max(id)::text FROM events").Scan(&last))
	waitFor(t, "the position at the last event", func() bool { _, pos = b.position(t, b.cfg.Process); return pos == last })
}

// TestAHandlerThatOverrunsItsTimeoutIsAppliedOnce: a transactional handler writes, then returns nil only
// after its timeout fired (it ignored its context). Its savepoint is released with the processor's own
// context, so its writes go once with the position; they are not kept beside a retry. Both handler forms.
func TestAHandlerThatOverrunsItsTimeoutIsAppliedOnce(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.projectionTable(t, "rm")
			b.insertSeqs(t, 2, 20)
			p := &slowOnce{projection: projection{table: "rm"}, timeout: 200 * time.Millisecond}
			b.cfg.Handler, b.cfg.HandlerTimeout = nil, p.timeout
			if batched {
				b.cfg.TxHandler = p
			} else {
				b.cfg.TxHandler = slowOneAtATime{p}
			}
			start(t, b.cfg)
			waitFor(t, "every event projected", func() bool {
				_, pos := b.position(t, b.cfg.Process)
				var last string
				require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT max(id)::text FROM events").Scan(&last))
				return pos == last
			})
			require.Equal(t, map[string]string{"k0": "10/10", "k1": "10/10"}, b.readModel(t, "rm"), "each event applied once")
		})
	}
}

// slowOnce is a projection whose first call overruns its timeout after writing, then returns nil.
type slowOnce struct {
	projection
	timeout time.Duration
	slowed  atomic.Bool
}

func (s *slowOnce) overrun() {
	if s.slowed.CompareAndSwap(false, true) {
		time.Sleep(s.timeout + 100*time.Millisecond) // ignoring its context, as a careless handler does
	}
}

func (s *slowOnce) HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[event]) error {
	if err := s.projection.HandleTxBatch(ctx, tx, recs); err != nil {
		return err
	}
	s.overrun()
	return nil
}

// slowOneAtATime is slowOnce without HandleTxBatch.
type slowOneAtATime struct{ s *slowOnce }

func (o slowOneAtATime) HandleTx(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
	if err := o.s.projection.HandleTx(ctx, tx, rec); err != nil {
		return err
	}
	o.s.overrun()
	return nil
}
