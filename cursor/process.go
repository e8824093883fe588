package cursor

import (
	"context"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/store"
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

// ReadOpts selects what Read reads.
type ReadOpts struct {
	// Process reads only this process, with its partitions' rows; empty reads every process. Name a
	// process, not one of its partitions (a partition's name reads that row alone, as a process).
	Process string
}

// Read reads processes with their streams' cursor rows, in one read, ordered by name, and which instance
// owns each, and decides each row's Status as `inorder status` does: for a stream an instance runs, not
// paused nor failing, it looks whether any row is after the position (one index probe; Measure counts
// them). It takes no lock and does not disturb running processors. An unknown Process gives none.
func Read(ctx context.Context, db DB, opts ReadOpts) ([]Process, error) {
	infos, err := list(ctx, db, opts.Process, true)
	if err != nil {
		return nil, err
	}
	procs := group(infos)
	if opts.Process == "" {
		return procs, nil
	}
	for _, p := range procs {
		if p.Name == opts.Process {
			return []Process{p}, nil
		}
	}
	return nil, nil
}

// readProcess reads process name as Read does, in tx; nil when there is none.
func readProcess(ctx context.Context, tx pgx.Tx, name string) (*Process, error) {
	procs, err := Read(ctx, tx, ReadOpts{Process: name})
	if err != nil || len(procs) == 0 {
		return nil, err
	}
	return &procs[0], nil
}

// group groups cursor rows, as list returns them, into processes, ordered by name. A row named as a
// partition whose parent is not among infos, is not partitioned or has another count is a process of its
// own, so that nothing is left out.
func group(infos []Info) []Process {
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
			name := store.PartitionName(in.Process, k, in.Partitions)
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
