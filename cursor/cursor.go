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
	// Partition places a partition's stream in its process; nil when the process is not partitioned.
	Partition *Partition
}

// Partition is one of Count streams a partitioned process is split into: the rows whose key column
// hashes to Index (processor.PartitionExpr). processor.Partition is the same type.
type Partition = source.Partition

// spec is the recorded source as the machinery takes it.
func (s Source) spec() source.Spec {
	return source.Spec{Table: s.Table, IDColumn: s.IDColumn, CreatedAtColumn: s.CreatedAtColumn, KeyColumn: s.KeyColumn,
		Partition: s.Partition}
}
