package cursor

import (
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// StartFrom is inordertype.StartFrom, kept here so that code written against package cursor compiles
// unchanged: where a process that has no cursor row yet starts. Its zero value says nothing.
type StartFrom = inordertype.StartFrom

var (
	// StartFromBeginning is inordertype.StartFromBeginning, kept here so that code written against package
	// cursor compiles unchanged: it registers an unknown process before every existing row.
	StartFromBeginning = inordertype.StartFromBeginning
	// StartFromNow is inordertype.StartFromNow, kept here so that code written against package cursor
	// compiles unchanged: it registers an unknown process after every row created before the moment of
	// registration.
	StartFromNow = inordertype.StartFromNow
)

// StartFromTime is inordertype.StartFromTime, kept here so that code written against package cursor
// compiles unchanged: it registers an unknown process so that it delivers the rows created at or after t.
func StartFromTime(t time.Time) StartFrom { return inordertype.StartFromTime(t) }

// ParseStartFrom is inordertype.ParseStartFrom, kept here so that code written against package cursor
// compiles unchanged: it reads "beginning", "now" or an RFC 3339 time, as StartFrom's String writes them.
func ParseStartFrom(v string) (StartFrom, error) { return inordertype.ParseStartFrom(v) }

// Source is inordertype.Source, kept here so that code written against package cursor compiles unchanged:
// what a process reads. Read from a cursor row (Info.Source), only the fields the row records are set:
// Table (schema-qualified), IDColumn, CreatedAtColumn, KeyColumn and Partition.
type Source = inordertype.Source

// Partition is inordertype.Partition, kept here so that code written against package cursor compiles
// unchanged: one of Count streams a partitioned process is split into.
type Partition = inordertype.Partition
