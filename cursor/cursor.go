package cursor

import (
	"time"

	"github.com/inorder-dev/inorder/internal/cursorlock"
	"github.com/inorder-dev/inorder/internal/source"
)

// StartFrom says where a process that has no cursor row yet starts: StartFromBeginning, StartFromNow or
// StartFromTime. It matters once, when the process is registered; an existing process keeps its position
// whatever it says. String and ParseStartFrom write and read it as "beginning", "now" or an RFC 3339 time.
//
// The zero value says nothing, and a processor refuses to register a process without it when its table
// already has rows: a new process name (a typo beside the real one, say) would otherwise deliver the whole
// table again, to a sink that may charge for each. On an empty table the zero value starts at the
// beginning, since there is nothing to deliver twice.
type StartFrom = cursorlock.Start

var (
	// StartFromBeginning registers an unknown process before every existing row.
	StartFromBeginning = cursorlock.StartBeginning()
	// StartFromNow registers an unknown process after every row created before the moment of registration.
	StartFromNow = cursorlock.StartNow()
)

// StartFromTime registers an unknown process so that it delivers the rows created at or after t.
func StartFromTime(t time.Time) StartFrom { return cursorlock.StartAt(t) }

// ParseStartFrom reads "beginning", "now" or an RFC 3339 time, as StartFrom's String writes them.
func ParseStartFrom(v string) (StartFrom, error) { return cursorlock.ParseStart(v) }

// Source is what a process reads, as recorded in its cursor row for status, lag and operator actions.
type Source struct {
	Table, IDColumn, CreatedAtColumn, KeyColumn string
	// Partition places a partition's stream in its process; nil when the process is not partitioned.
	Partition *Partition
}

// Partition is one of Count streams a partitioned process is split into (processor.NewPartitioned): the
// rows whose key column, as text, hashes (hashtextextended, as hash partitioning does) to Index modulo
// Count, so that one key always lands in one partition and keeps its order. Its cursor row is named
// "<process>#<Index>/<Count>"; Process groups such rows with their process.
type Partition = source.Partition

// spec is the recorded source as the machinery takes it.
func (s Source) spec() source.Spec {
	return source.Spec{Table: s.Table, IDColumn: s.IDColumn, CreatedAtColumn: s.CreatedAtColumn, KeyColumn: s.KeyColumn,
		Partition: s.Partition}
}
