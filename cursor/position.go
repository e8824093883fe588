package cursor

import "github.com/inorder-dev/inorder/inordertype"

// Position is inordertype.Position, kept here so that code written against package cursor compiles
// unchanged: where a process stands in its source, the (created_at, id) pair of the last record it handled.
type Position = inordertype.Position

// Halt is inordertype.Halt, kept here so that code written against package cursor compiles unchanged: the
// state of a stream stopped on a failing record, as its cursor row keeps it.
type Halt = inordertype.Halt

// State is inordertype.State, kept here so that code written against package cursor compiles unchanged:
// what a cursor row holds, its Position, its Halt and whether an operator paused it.
type State = inordertype.State
