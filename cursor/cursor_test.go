package cursor_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgtest.DB, cursor.Config) {
	t.Helper()
	db := pgtest.New(t)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, cursor.Config{ConnConfig: cc, IdleInTransactionTimeout: 5 * time.Second}
}

func TestOneRepositoryPerNameAndNoOther(t *testing.T) {
	t.Parallel()
	_, cfg := setup(t)
	ctx := context.Background()
	reg := &cursor.Registry{}
	a, err := reg.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	again, err := reg.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.Same(t, a, again, "asking twice for a name gives the same repository")
	other, err := reg.Open(ctx, "refunds", cfg)
	require.NoError(t, err)
	require.NotSame(t, a, other)
	require.Equal(t, "orders", a.Name())

	require.NoError(t, a.Claim())
	require.ErrorIs(t, a.Claim(), cursor.ErrInUse, "two processors in one Go process cannot share a cursor")
	a.Unclaim()

	var settings [2]string
	require.NoError(t, a.Conn().QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('tcp_keepalives_idle')").
		Scan(&settings[0], &settings[1]))
	require.Equal(t, [2]string{"5s", "10"}, settings, "the dedicated connection carries its timeouts")

	require.NoError(t, a.Release(ctx))
	_, err = a.TryLock(ctx)
	require.ErrorIs(t, err, cursor.ErrReleased)
	fresh, err := reg.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NotSame(t, a, fresh, "a released name opens anew")
	require.NoError(t, fresh.Release(ctx))
	require.NoError(t, other.Release(ctx))
}

func TestLockIsExclusiveAndRegistrationStartsWhereAsked(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	ctx := context.Background()
	before := time.Now()
	cfg.StartFrom = cursor.StartFromNow
	first, err := (&cursor.Registry{}).Open(ctx, "now_process", cfg)
	require.NoError(t, err)
	second, err := (&cursor.Registry{}).Open(ctx, "now_process", cfg)
	require.NoError(t, err)

	ok, err := first.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	pos := first.State().Position
	require.False(t, pos.IsBeginning())
	require.Empty(t, pos.ID, "start from now: after every row created before registration")
	require.WithinDuration(t, before, pos.CreatedAt, time.Minute)

	ok, err = second.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "held elsewhere is an answer, not an error")
	require.NoError(t, first.Unlock(ctx))
	ok, err = second.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the owner keeps the process between batches")

	require.NoError(t, first.Release(ctx))
	ok, err = second.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the standby takes over as soon as the owner released the process")
	moved := cursor.Position{CreatedAt: pos.CreatedAt.Add(time.Second), ID: "7"}
	require.NoError(t, second.SetPosition(ctx, moved, 1))
	require.NoError(t, second.Unlock(ctx))
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT position_id FROM inorder.cursor WHERE process_name = 'now_process'").Scan(&id))
	require.Equal(t, "7", id)
	require.NoError(t, second.Release(ctx))

	cfg.StartFrom = cursor.StartFromBeginning
	third, err := (&cursor.Registry{}).Open(ctx, "now_process", cfg)
	require.NoError(t, err)
	ok, err = third.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "7", third.State().Position.ID, "an existing process keeps its position whatever StartFrom says")
	require.NoError(t, third.Release(ctx))
}

// TestListCountsOnlyThisDatabasesInstances: a process of the same name in another database on the server
// is another process; its instances are not connected to this one.
func TestListCountsOnlyThisDatabasesInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	here, cfg := setup(t)
	_, other := setup(t)
	cfg.Instance, other.Instance = "here", "elsewhere"
	mine, err := (&cursor.Registry{}).Open(ctx, "same_name", cfg)
	require.NoError(t, err)
	defer mine.Release(ctx) //nolint:errcheck // cleanup
	theirs, err := (&cursor.Registry{}).Open(ctx, "same_name", other)
	require.NoError(t, err)
	defer theirs.Release(ctx) //nolint:errcheck // cleanup

	conn, err := here.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	infos, err := cursor.List(ctx, conn.Conn(), "same_name")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, 1, infos[0].Connected, "only this database's instance")
}
