package processor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
)

// TestTxHandlerIsExactlyOnceAcrossACrash kills the cursor connection after the handler wrote to the read
// model but before the position committed: after the reconnect neither is there, the record is handled
// again, and the read model counts every record exactly once.
func TestTxHandlerIsExactlyOnceAcrossACrash(t *testing.T) {
	t.Parallel()
	for _, cp := range []processor.Checkpoint{processor.CheckpointRecord, processor.CheckpointBatch} {
		t.Run(string(cp), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.db.Exec(t, `CREATE TABLE totals (aggregate_id text PRIMARY KEY, events int NOT NULL, last_seq int NOT NULL)`)
			ids := b.insert(t, 30)
			crashOn := ids[17]
			var mu sync.Mutex
			calls := map[int64]int{}
			cfg := b.cfg
			cfg.Checkpoint = cp
			cfg.Handler = nil
			cfg.TxHandler = handlers.TxHandlerFunc[event](func(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
				_, err := tx.Exec(ctx, `
					INSERT INTO totals VALUES ($1, 1, $2)
					ON CONFLICT (aggregate_id) DO UPDATE SET events = totals.events + 1, last_seq = excluded.last_seq`,
					rec.Value.AggregateID, rec.Value.Seq)
				if err != nil {
					return err
				}
				mu.Lock()
				calls[rec.Value.ID]++
				first := calls[rec.Value.ID] == 1
				mu.Unlock()
				if rec.Value.ID == crashOn && first {
					// The write is done inside the cursor transaction; now the connection dies.
					_, err := b.db.Pool.Exec(context.Background(), "SELECT pg_terminate_backend($1)", tx.Conn().PgConn().PID())
					require.NoError(t, err)
				}
				return nil
			})
			start(t, cfg)
			waitFor(t, "the position at the last record", func() bool {
				_, pos := b.position(t, cfg.Process)
				return pos == idText(ids[29])
			})
			var events, lastSeq int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				"SELECT events, last_seq FROM totals WHERE aggregate_id = 'a'").Scan(&events, &lastSeq))
			require.Equal(t, 30, events, "every record counted exactly once")
			require.Equal(t, 30, lastSeq)
			mu.Lock()
			require.Equal(t, 2, calls[crashOn], "the record whose commit was lost was handled again")
			mu.Unlock()
		})
	}
}

// TestTxHandlerFailureRollsBackItsOwnWritesOnly: a failing record's writes are undone, those of the
// records before it in the batch are kept with their position.
func TestTxHandlerFailureRollsBackItsOwnWritesOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE TABLE seen (id bigint PRIMARY KEY)`)
	ids := b.insert(t, 8)
	var mu sync.Mutex
	fail := true
	cfg := b.cfg
	cfg.Checkpoint = processor.CheckpointBatch
	cfg.Handler = nil
	cfg.TxHandler = handlers.TxHandlerFunc[event](func(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
		if _, err := tx.Exec(ctx, "INSERT INTO seen VALUES ($1)", rec.Value.ID); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if rec.Value.ID == ids[5] && fail {
			return errTest
		}
		return nil
	})
	start(t, cfg)
	waitFor(t, "the halt", func() bool { return haltedOn(t, b) == idText(ids[5]) })
	var seen []int64
	rows, err := b.db.Pool.Query(context.Background(), "SELECT id FROM seen ORDER BY id")
	require.NoError(t, err)
	seen, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, ids[:5], seen)
	mu.Lock()
	fail = false
	mu.Unlock()
	waitFor(t, "the end", func() bool {
		_, pos := b.position(t, cfg.Process)
		return pos == idText(ids[7])
	})
}
