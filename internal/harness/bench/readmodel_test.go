package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// readModelDDL is the read model the projections write: a row per event, upserted.
const readModelDDL = `CREATE TABLE rm (id bigint PRIMARY KEY, aggregate_id text NOT NULL, seq integer NOT NULL)`

// upsertSQL upserts the events given as arrays, with one statement however many.
const upsertSQL = `INSERT INTO rm (id, aggregate_id, seq) SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[])
	ON CONFLICT (id) DO UPDATE SET aggregate_id = excluded.aggregate_id, seq = excluded.seq`

// rmProjection projects events into rm, an upsert each: a batch at a time (HandleTxBatch) or a record at
// a time (HandleTx, when hidden behind a TxHandlerFunc).
type rmProjection struct{}

func (rmProjection) HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[event]) error {
	ids := make([]int64, len(recs))
	aggs := make([]string, len(recs))
	seqs := make([]int32, len(recs))
	for i, r := range recs {
		ids[i], aggs[i], seqs[i] = r.Value.ID, r.Value.AggregateID, r.Value.Seq
	}
	_, err := tx.Exec(ctx, upsertSQL, ids, aggs, seqs)
	return err
}

func (p rmProjection) HandleTx(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
	return p.HandleTxBatch(ctx, tx, []*handlers.Record[event]{rec})
}

// measureReadModel projects n events into the read model with inorder: batched (a TxBatchHandler, one
// upsert statement per batch of 1000) or one record at a time (per-batch checkpoints either way).
func measureReadModel(tb testing.TB, n int, batched bool) result {
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	db.Exec(tb, readModelDDL)
	lastID, lastAt := lastRow(tb, db, "events")
	// One record (and one savepoint) at a time: the same projection behind a TxHandlerFunc, which hides
	// HandleTxBatch from the processor.
	var h handlers.TxHandler[event] = handlers.TxHandlerFunc[event](rmProjection{}.HandleTx)
	if batched {
		h = rmProjection{}
	}
	if _, ok := h.(handlers.TxBatchHandler[event]); ok != batched {
		tb.Fatalf("the read model's handler takes batches: %v, want %v", ok, batched)
	}
	return drain(tb, db, processor.Config[event]{
		StartFrom:  inordertype.StartFromBeginning,
		Process:    "bench_readmodel",
		Source:     inordertype.Source{Table: "events", Columns: eventColumns},
		TxHandler:  h,
		BatchSize:  1000,
		Checkpoint: processor.CheckpointBatch,
	}, n, lastID, lastAt, 5*time.Minute)
}

// measureInsertSelect is the limit: the same rows into the same read model with one plain
// INSERT ... SELECT, no inorder.
func measureInsertSelect(tb testing.TB, n int) result {
	db := pgtest.New(tb)
	insertEvents(tb, db, n)
	db.Exec(tb, readModelDDL)
	start := time.Now()
	db.Exec(tb, `INSERT INTO rm (id, aggregate_id, seq) SELECT id, aggregate_id, seq FROM events`)
	return result{n: n, elapsed: time.Since(start)}
}

func BenchmarkReadModel(b *testing.B) {
	b.Run("insert_select", func(b *testing.B) {
		record(b, "rm_insert_select", measureInsertSelect(b, readModelRows))
	})
	b.Run("batched", func(b *testing.B) {
		record(b, "rm_batched", measureReadModel(b, readModelRows, true))
	})
	b.Run("one_record", func(b *testing.B) {
		record(b, "rm_one", measureReadModel(b, readModelOneRows, false))
	})
}

// readModelRows is the backlog of the read-model measures; the one-record handler gets fewer, as it takes
// a savepoint and a statement per record.
const (
	readModelRows    = 1_000_000
	readModelOneRows = 100_000
)
