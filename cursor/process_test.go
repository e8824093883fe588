package cursor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
)

// TestReadIsTheOneListing reads processes with their streams in one read: every process, or one, whose
// partitions' rows come with it.
func TestReadIsTheOneListing(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO inorder.cursor (process_name, partitions)
		VALUES ('split', 2), ('split#1/2', NULL), ('single', NULL)`)
	require.NoError(t, err)

	procs, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{})
	require.NoError(t, err)
	require.Len(t, procs, 2)
	require.Equal(t, "single", procs[0].Name)
	require.Equal(t, []string{"single"}, []string{procs[0].Streams[0].Process})
	require.Equal(t, "split", procs[1].Name)
	require.True(t, procs[1].Partitioned())
	require.Len(t, procs[1].Streams, 1)
	require.Equal(t, "split#1/2", procs[1].Streams[0].Process)
	require.Equal(t, []string{"split#0/2"}, procs[1].Unregistered)

	one, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "split"})
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, procs[1].Name, one[0].Name)
	require.Equal(t, procs[1].Unregistered, one[0].Unregistered)
	none, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: "nothing"})
	require.NoError(t, err)
	require.Empty(t, none)
}
