// Package inordertype holds the types that inorder's packages share with their users: where a process
// stands in its source, why its stream is stopped, what its cursor row holds, where a new process starts,
// and what it reads. It has no behaviour beyond formatting and parsing these values and imports nothing of
// inorder's, so that package processor, package cursor and inorder's internals all speak of one Position,
// one Halt and one Source, and `go doc` shows their fields here.
//
// # Positions
//
// A Position is the (time, id) pair of the last record a process handled, its time the table's insert
// clock (created_at for rows older than the clock, and on a table read by created_at as opted in): the
// zero Position is the beginning, a time alone is "after every row at or before it", and a time with an id
// is "after exactly that row". String formats it for logs and status; MarshalJSON and UnmarshalJSON are the form the
// audit table stores and `inorder audit --json` prints.
//
// # Cursor rows
//
// A process's cursor row holds a State: its Position, a Halt while a record is failing (the record, the
// last error, the attempts, when it is tried next and whether the stream counts as halted yet), and
// whether an operator paused it. StartFrom says where a process that has no cursor row yet starts; its
// zero value says nothing, which a processor refuses on a table that already has rows.
//
// # Sources
//
// A Source names the table a process reads, the columns that order it (IDColumn, CreatedAtColumn), the
// key column that groups its records, the Partition of a partitioned process, the Horizon that decides
// which transactions the read waits for, and the columns each record carries. A processor is configured
// with it; its cursor row records the part that operator actions need, and a Source read back from a
// cursor row has only that part (each field says whether it is recorded).
package inordertype
