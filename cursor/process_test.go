package cursor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
)

func TestProcessesGroupsPartitionsWithTheirProcess(t *testing.T) {
	t.Parallel()
	row := func(name string, partitions int) cursor.Info {
		return cursor.Info{Process: name, Partitions: partitions}
	}
	type want struct {
		name         string
		streams      []string
		unregistered []string
	}
	for _, tt := range []struct {
		name string
		rows []cursor.Info
		want []want
	}{
		{name: "one stream", rows: []cursor.Info{row("a", 0)}, want: []want{{name: "a", streams: []string{"a"}}}},
		{name: "partitions in index order, the parent's row not a stream",
			rows: []cursor.Info{row("a", 3), row("a#0/3", 0), row("a#1/3", 0), row("a#2/3", 0), row("b", 0)},
			want: []want{{name: "a", streams: []string{"a#0/3", "a#1/3", "a#2/3"}}, {name: "b", streams: []string{"b"}}}},
		{name: "a partition without a row",
			rows: []cursor.Info{row("a#1/3", 0), row("a", 3)},
			want: []want{{name: "a", streams: []string{"a#1/3"}, unregistered: []string{"a#0/3", "a#2/3"}}}},
		{name: "rows no process of theirs claims stand alone",
			rows: []cursor.Info{row("a", 2), row("a#0/2", 0), row("a#1/2", 0), row("a#0/3", 0), row("c#0/2", 0), row("a#x", 0)},
			want: []want{{name: "a", streams: []string{"a#0/2", "a#1/2"}}, {name: "a#0/3", streams: []string{"a#0/3"}},
				{name: "a#x", streams: []string{"a#x"}}, {name: "c#0/2", streams: []string{"c#0/2"}}}},
		{name: "none", rows: nil, want: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []want
			for _, p := range cursor.Processes(tt.rows) {
				w := want{name: p.Name, unregistered: p.Unregistered}
				for _, s := range p.Streams {
					w.streams = append(w.streams, s.Process)
				}
				require.Equal(t, p.Name, p.Info.Process, "Info is the process's own row")
				got = append(got, w)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestReadIsTheOneListing reads processes with their streams in one read: every process, or one, whose
// partitions' rows come with it; and the deprecated listings say the same.
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

	old, err := cursor.ListProcesses(ctx, db.Pool, "split")
	require.NoError(t, err)
	require.Equal(t, one[0].Name, old[0].Name)
	require.Equal(t, one[0].Unregistered, old[0].Unregistered)
	rows, err := cursor.List(ctx, db.Pool, "")
	require.NoError(t, err)
	var names []string
	for _, in := range rows {
		names = append(names, in.Process)
	}
	require.Equal(t, []string{"single", "split", "split#1/2"}, names, "List reads the rows, in name order")
}
