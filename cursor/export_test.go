package cursor

// StatusOf is statusOf, for the table of its rules.
var StatusOf = statusOf

// The refusals that say what to fix, for the tests that check an action refuses for the right reason.
var (
	ErrForward    = errForward
	ErrNotDrained = errNotDrained
	ErrNoReaders  = errNoReaders
	ErrHalted     = errHalted
)
