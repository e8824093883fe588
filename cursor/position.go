package cursor

import (
	"github.com/inorder-dev/inorder/internal/cursorlock"
	"github.com/inorder-dev/inorder/internal/source"
)

// Position is where a process stands in its source: the (created_at, id) pair of the last record it
// handled, so that ties on created_at are neither lost nor reordered. A zero CreatedAt is the beginning
// (IsBeginning); an empty ID with a CreatedAt is "after every row created at or before CreatedAt", where a
// process registered with StartFromNow starts. String formats it for logs and status.
type Position = source.Position

// Halt is the state of a stream stopped on a failing record, kept in the cursor row so that an operator
// sees it with `inorder status` and retries keep counting across instances: the record's id, the last
// error and the sink's status code, whether the sink refused the record itself (Permanent), the attempts,
// when it first and last failed and is tried next, and HaltedAt, when the stream counted as halted (zero
// while it is only retrying: Retrying).
type Halt = cursorlock.Halt

// State is what a cursor row holds: the Position, the Halt (nil when no record is failing) and whether an
// operator Paused the process.
type State = cursorlock.State
