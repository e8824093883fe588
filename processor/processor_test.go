package processor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/processor"
)

func TestDeliversInOrderWithTies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// One statement with a now() created_at: every row ties, and ids must break the ties.
	b.db.Exec(t, `INSERT INTO events (aggregate_id, seq, created_at) SELECT 'a', g, now() FROM generate_series(1, 25) g`)
	want := b.insert(t, 30)
	var first []int64
	rows, err := b.db.Pool.Query(context.Background(), "SELECT id FROM events ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		first = append(first, id)
	}
	require.Len(t, first, 55)
	stop := start(t, b.cfg)
	waitFor(t, "55 records", func() bool { return b.h.count() >= 55 })
	require.NoError(t, stop())
	require.Equal(t, first, b.h.ids(), "delivered in (created_at, id) order, batches of 10")
	_, id := b.position(t, b.cfg.Process)
	require.Equal(t, idsText(want[len(want)-1:]), "["+id+"]")
}

func TestHaltsOnFailingRecordAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 5)
	b.h.setFail(ids[2], errors.New("processor says no"))
	stop := start(t, b.cfg)
	waitFor(t, "3 attempts at the failing record", func() bool {
		b.h.mu.Lock()
		defer b.h.mu.Unlock()
		return b.h.calls[ids[2]] >= 3
	})
	require.Equal(t, ids[:2], b.h.ids(), "records before the failing one are kept, none after it")
	_, pos := b.position(t, b.cfg.Process)
	require.Equal(t, idsText(ids[1:2]), "["+pos+"]", "the position stays before the failing record")
	var haltID, haltErr string
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT halted_record_id, halted_error, halted_attempts
		FROM inorder.cursor WHERE process_name = $1`, b.cfg.Process).Scan(&haltID, &haltErr, &attempts))
	require.Equal(t, idsText(ids[2:3]), "["+haltID+"]")
	require.Equal(t, "processor says no", haltErr)
	require.GreaterOrEqual(t, attempts, 2)

	b.h.setFail(ids[2], nil)
	waitFor(t, "all 5", func() bool { return b.h.count() >= 5 })
	require.NoError(t, stop())
	require.Equal(t, ids, b.h.ids())
	var halted *string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT halted_record_id FROM inorder.cursor WHERE process_name = $1`, b.cfg.Process).Scan(&halted))
	require.Nil(t, halted, "halt state cleared once the record went through")
}

func TestStructColumnsAreTheDefaultSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, 3)
	b.cfg.Source.Columns = nil // event has no payload field: only its own columns are read
	stop := start(t, b.cfg)
	waitFor(t, "3 records", func() bool { return b.h.count() == 3 })
	require.NoError(t, stop())
	require.Equal(t, ids, b.h.ids())

	type extra struct {
		ID     int64  `db:"id"`
		Colour string `db:"colour"`
	}
	p, err := processor.New(processor.Config[extra]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "extra", ClientConfig: processor.ClientConfig{ConnConfig: b.cfg.ClientConfig.ConnConfig}, Source: inordertype.Source{Table: "events"},
		Handler: handlers.HandlerFunc[extra](func(context.Context, *handlers.Record[extra]) error { return nil }),
	})
	require.NoError(t, err)
	err = p.Run(context.Background())
	require.ErrorIs(t, err, processor.ErrInvalidSource)
	require.Contains(t, err.Error(), `selected column "colour" does not exist in public.events`)
}
