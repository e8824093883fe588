package cursor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupPutsPartitionsWithTheirProcess(t *testing.T) {
	t.Parallel()
	row := func(name string, partitions int) Info {
		return Info{Process: name, Partitions: partitions}
	}
	type want struct {
		name         string
		streams      []string
		unregistered []string
	}
	for _, tt := range []struct {
		name string
		rows []Info
		want []want
	}{
		{name: "one stream", rows: []Info{row("a", 0)}, want: []want{{name: "a", streams: []string{"a"}}}},
		{name: "partitions in index order, the parent's row not a stream",
			rows: []Info{row("a", 3), row("a#0/3", 0), row("a#1/3", 0), row("a#2/3", 0), row("b", 0)},
			want: []want{{name: "a", streams: []string{"a#0/3", "a#1/3", "a#2/3"}}, {name: "b", streams: []string{"b"}}}},
		{name: "a partition without a row",
			rows: []Info{row("a#1/3", 0), row("a", 3)},
			want: []want{{name: "a", streams: []string{"a#1/3"}, unregistered: []string{"a#0/3", "a#2/3"}}}},
		{name: "rows no process of theirs claims stand alone",
			rows: []Info{row("a", 2), row("a#0/2", 0), row("a#1/2", 0), row("a#0/3", 0), row("c#0/2", 0), row("a#x", 0)},
			want: []want{{name: "a", streams: []string{"a#0/2", "a#1/2"}}, {name: "a#0/3", streams: []string{"a#0/3"}},
				{name: "a#x", streams: []string{"a#x"}}, {name: "c#0/2", streams: []string{"c#0/2"}}}},
		{name: "none", rows: nil, want: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []want
			for _, p := range group(tt.rows) {
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
