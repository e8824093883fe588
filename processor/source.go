package processor

import (
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// Source is inordertype.Source, kept here so that code written against package processor compiles
// unchanged: the table a process reads and the columns that order it. Its fields are documented there.
type Source = inordertype.Source

// Horizon is inordertype.Horizon, kept here so that code written against package processor compiles
// unchanged: which transactions a processor waits for before it reads past a time. See the package
// documentation, "The horizon".
type Horizon = inordertype.Horizon

const (
	// HorizonAuto is inordertype.HorizonAuto, kept here so that code written against package processor
	// compiles unchanged: it decides at start-up from the created_at column's default.
	HorizonAuto = inordertype.HorizonAuto
	// HorizonWriters is inordertype.HorizonWriters, kept here so that code written against package
	// processor compiles unchanged: for a created_at that is the time of the insert (clock_timestamp()).
	HorizonWriters = inordertype.HorizonWriters
	// HorizonTransactions is inordertype.HorizonTransactions, kept here so that code written against
	// package processor compiles unchanged: for a created_at that may be as early as the start of its
	// transaction (now()).
	HorizonTransactions = inordertype.HorizonTransactions
)

// ParseHorizon is inordertype.ParseHorizon, kept here so that code written against package processor
// compiles unchanged: it reads "auto", "writers" or "transactions", as the CLI's --horizon takes them.
func ParseHorizon(s string) (Horizon, error) { return inordertype.ParseHorizon(s) }

// ErrInvalidSource is wrapped by every error about a source that cannot be read as configured: a missing
// table, column or index, or a column of the wrong type. Retrying does not help; fix the configuration.
var ErrInvalidSource = source.ErrInvalidSource
