package cursor_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// TestActionsThroughATransactionPooler runs a processor and every operator action through PgBouncer in
// transaction mode with its default configuration, where no session stays a client's own: status names
// the owner from its lease, skip, pause, resume and rewind act on the running processor, prune keeps what
// it needs, repartition and forget refuse while the instance runs and work once it stopped.
func TestActionsThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := setup(t)
	db.Exec(t, `CREATE TABLE bookings (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id)`)
	pgtest.AddClock(t, db, "bookings")
	db.Exec(t, "INSERT INTO bookings SELECT FROM generate_series(1, 5)")
	bouncer := pgtest.Bouncer(t, db, pgbouncer.Transaction, nil)
	url := bouncer.URL(db.Name, "default_query_exec_mode=exec")
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()

	h := refusingRecorder(3)
	p, err := processor.New(processor.Config[booking]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "billing", ClientConfig: processor.ClientConfig{ConnConfig: cc, Instance: "pooled-1"}, Source: inordertype.Source{Table: "bookings", Columns: []string{"id"}},
		Handler: h, PollInterval: 20 * time.Millisecond, RetryMin: time.Minute, RetryMax: time.Minute,
		Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	require.NoError(t, err)
	stop := testrun.Start(t, p.Run)
	var in cursor.Info
	await(t, "the stream to halt on record 3", func() bool {
		infos, err := cursor.Read(ctx, pool, cursor.ReadOpts{Process: "billing"})
		if err != nil || len(infos) != 1 || infos[0].Info.Halt == nil {
			return false
		}
		in = infos[0].Info
		return true
	})
	require.True(t, in.Locked)
	require.Equal(t, "pooled-1", in.Holder, "the owner, from its lease")
	require.Zero(t, in.HolderPID, "no session is the owner's own through the pooler")
	require.Equal(t, 1, in.Connected)
	require.Positive(t, in.Epoch)

	ops := cursor.ActionOpts{Actor: "ops", Reason: "closed account"}
	_, err = cursor.Skip(ctx, pool, "billing", "3", ops)
	require.NoError(t, err)
	await(t, "the records after the skipped one", func() bool { return h.Len() == 4 })
	require.Equal(t, []string{"1", "2", "4", "5"}, h.IDs())

	_, err = cursor.Pause(ctx, pool, "billing", ops)
	require.NoError(t, err)
	_, err = cursor.Rewind(ctx, pool, "billing", cursor.RewindTarget{RecordID: "4"}, ops)
	require.NoError(t, err)
	_, err = cursor.Resume(ctx, pool, "billing", ops)
	require.NoError(t, err)
	await(t, "the rewound records", func() bool { return h.Len() == 6 })
	require.Equal(t, []string{"1", "2", "4", "5", "4", "5"}, h.IDs())
	await(t, "the position to be durable at the last record", func() bool {
		infos, err := cursor.Read(ctx, pool, cursor.ReadOpts{Process: "billing"})
		return err == nil && len(infos) == 1 && infos[0].Info.Position.ID == "5"
	})

	res, err := cursor.Prune(ctx, pool, cursor.PruneOpts{ActionOpts: ops, Table: "bookings",
		Before: time.Now().Add(time.Hour), BatchSize: 2})
	require.NoError(t, err)
	require.EqualValues(t, 5, res.Rows, "every row is behind the position")

	_, err = cursor.Forget(ctx, pool, "billing", ops)
	require.ErrorIs(t, err, cursor.ErrBusy, "the running instance's lease refuses it")
	require.ErrorContains(t, err, "pooled-1")
	_, err = cursor.Repartition(ctx, pool, "billing", 2, ops)
	require.ErrorIs(t, err, cursor.ErrBusy, "not while an instance runs it")
	require.NoError(t, stop())
	_, err = cursor.Repartition(ctx, pool, "billing", 2, ops)
	require.NoError(t, err, "drained and stopped")
	procs, err := cursor.Read(ctx, pool, cursor.ReadOpts{Process: "billing"})
	require.NoError(t, err)
	require.Len(t, procs, 1)
	require.Len(t, procs[0].Streams, 2, "the process and its two partitions")
	_, err = cursor.Forget(ctx, pool, "billing", ops)
	require.NoError(t, err)
	entries, err := cursor.Audit(ctx, pool, cursor.AuditOpts{Process: "billing"})
	require.NoError(t, err)
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []string{"forget", "repartition", "prune", "resume", "rewind", "pause", "skip"}, actions)
	require.EqualValues(t, 5, entries[2].Detail.Rows, "the prune's entry counts every batch")
}
