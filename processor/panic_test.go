package processor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
)

// TestAHandlersPanicKeepsItsStack: a panicking handler fails its record like an error; the cursor row
// keeps the panic's value, and the log the stack that says where it happened.
func TestAHandlersPanicKeepsItsStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, 2)
	logs := &logBuffer{}
	cfg := b.cfg
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t)))
	cfg.Handler = handlers.HandlerFunc[event](func(_ context.Context, rec *handlers.Record[event]) error {
		if rec.Value.ID == ids[1] {
			explode(rec.Value.Seq)
		}
		return nil
	})
	start(t, cfg)
	waitFor(t, "the record that panics to fail", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		return err == nil && len(procs) == 1 && procs[0].Info.Halt != nil
	})
	procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
	require.NoError(t, err)
	require.Equal(t, "handler panicked: seq 2 does not add up", procs[0].Info.Halt.Error)
	// Every attempt panics again and logs again: at least the first is there.
	require.GreaterOrEqual(t, logs.count("the handler panicked; the record counts as failed"), 1)
	require.GreaterOrEqual(t, logs.count("processor_test.explode"), 1, "the stack names the function that panicked")
}

func explode(seq int) {
	panic("seq " + string(rune('0'+seq)) + " does not add up")
}

// TestATransactionalHandlersPanicLeavesNothingWritten: what a TxHandler wrote before it panicked is
// rolled back with its savepoint, like a failure's, so the record's next attempt starts clean.
func TestATransactionalHandlersPanicLeavesNothingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, `CREATE TABLE seen (id bigint PRIMARY KEY)`)
	ids := b.insert(t, 3)
	var once sync.Once
	cfg := b.cfg
	cfg.Handler = nil
	cfg.TxHandler = handlers.TxHandlerFunc[event](func(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
		if _, err := tx.Exec(ctx, `INSERT INTO seen (id) VALUES ($1)`, rec.Value.ID); err != nil {
			return err // a write left behind by the panic would refuse this insert: duplicate key
		}
		if rec.Value.ID == ids[1] {
			once.Do(func() { panic("after its write") })
		}
		return nil
	})
	start(t, cfg)
	waitFor(t, "every record", func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM seen`).Scan(&n))
		return n == 3
	})
	procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
	require.NoError(t, err)
	require.Nil(t, procs[0].Info.Halt, "the record went through on its second attempt")
}
