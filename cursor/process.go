package cursor

import (
	"context"
	"sort"

	"github.com/inorder-dev/inorder/internal/cursorlock"
)

// Process is a process with the streams it runs as. A process that is not partitioned is one stream, its
// own cursor row. A partitioned one (processor.NewPartitioned) is a parent row, which holds the partition
// count and no position anyone reads, and one row per partition, named "<process>#<index>/<count>", each
// with its own position. Status, lag, prune, forget, repartition and the wait helpers all read a process
// through this one type.
type Process struct {
	// Name is the process's name.
	Name string
	// Info is the process's own cursor row: its one stream, or the parent row of a partitioned process.
	Info Info
	// Streams are the rows its records are delivered under: Info itself for a process that is not
	// partitioned, else its partitions' rows in index order, leaving out the partitions without a row yet
	// (Unregistered).
	Streams []Info
	// Unregistered names the partitions that have no cursor row yet: they never ran, so they stand at the
	// beginning of the source.
	Unregistered []string
}

// Partitioned reports whether the process runs as partitions.
func (p *Process) Partitioned() bool { return p.Info.Partitions > 0 }

// Processes groups cursor rows, as List returns them, into processes, ordered by name. A row named as a
// partition whose parent is not among infos, is not partitioned or has another count is a process of its
// own, so that nothing is left out.
func Processes(infos []Info) []Process {
	byName := make(map[string]*Info, len(infos))
	for i := range infos {
		byName[infos[i].Process] = &infos[i]
	}
	belongs := map[string]bool{} // rows that are a partition of a process among infos
	var out []Process
	for i := range infos {
		in := infos[i]
		if in.Partitions == 0 {
			continue
		}
		p := Process{Name: in.Process, Info: in}
		for k := range in.Partitions {
			name := cursorlock.PartitionName(in.Process, k, in.Partitions)
			if s, ok := byName[name]; ok {
				p.Streams = append(p.Streams, *s)
				belongs[name] = true
			} else {
				p.Unregistered = append(p.Unregistered, name)
			}
		}
		out = append(out, p)
	}
	for _, in := range infos {
		if in.Partitions == 0 && !belongs[in.Process] {
			out = append(out, Process{Name: in.Process, Info: in, Streams: []Info{in}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ListProcesses reads process name with its streams' rows, or every process when name is empty, in one
// read as List does. Name a process, not one of its partitions. An unknown name gives none.
func ListProcesses(ctx context.Context, db DB, name string) ([]Process, error) {
	infos, err := list(ctx, db, name, true)
	if err != nil {
		return nil, err
	}
	procs := Processes(infos)
	if name == "" {
		return procs, nil
	}
	for _, p := range procs {
		if p.Name == name {
			return []Process{p}, nil
		}
	}
	return nil, nil
}
