package cursor

import "github.com/inorder-dev/inorder/internal/source"

// StartFrom says where a process that has no cursor row yet starts.
type StartFrom int

const (
	// StartFromBeginning registers an unknown process before every existing row.
	StartFromBeginning StartFrom = iota
	// StartFromNow registers an unknown process after every row created before the moment of registration.
	StartFromNow
)

// Source is what a process reads, as recorded in its cursor row for status, lag and operator actions.
type Source struct {
	Table, IDColumn, CreatedAtColumn, KeyColumn string
	// Partition and Partitions place a partition's stream in its process (Partitions 0: not partitioned).
	Partition, Partitions int
}

// spec is the recorded source as the machinery takes it.
func (s Source) spec() source.Spec {
	sp := source.Spec{Table: s.Table, IDColumn: s.IDColumn, CreatedAtColumn: s.CreatedAtColumn, KeyColumn: s.KeyColumn}
	if s.Partitions > 0 {
		sp.Partition = &source.Partition{Index: s.Partition, Count: s.Partitions}
	}
	return sp
}
