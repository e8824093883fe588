package cursor_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgtest.DB, store.Config) {
	t.Helper()
	db := pgtest.New(t)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, store.Config{ConnConfig: cc, IdleInTransactionTimeout: 5 * time.Second, Start: inordertype.StartFromBeginning}
}

// TestListCountsOnlyThisDatabasesInstances: a process of the same name in another database on the server
// is another process; its instances are not connected to this one.
func TestListCountsOnlyThisDatabasesInstances(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	ctx := context.Background()
	here, cfg := setup(t)
	_, other := setup(t)
	cfg.Instance, other.Instance = "here", "elsewhere"
	mine, err := cursors.Open(ctx, "same_name", cfg)
	require.NoError(t, err)
	defer mine.Release(ctx) //nolint:errcheck // cleanup
	theirs, err := cursors.Open(ctx, "same_name", other)
	require.NoError(t, err)
	defer theirs.Release(ctx) //nolint:errcheck // cleanup

	conn, err := here.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	infos, err := cursor.Read(ctx, conn.Conn(), cursor.ReadOpts{Process: "same_name"})
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, 1, infos[0].Info.Connected, "only this database's instance")
}
