package processor

import (
	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/source"
)

// Source names the table a process reads and the columns that order it.
type Source struct {
	// Table is the source table, optionally schema-qualified ("bookings", "sales.bookings"); quote parts
	// that need it as in SQL ("\"Bookings\""). Plain and partitioned tables are supported. Required.
	Table string
	// IDColumn is the column that breaks ties on CreatedAtColumn; together they identify a row. Its type
	// must be smallint, integer, bigint, uuid, text or varchar. Empty means "id".
	IDColumn string
	// CreatedAtColumn orders the table; timestamptz (recommended) or timestamp, best with DEFAULT
	// clock_timestamp(). Empty means "created_at".
	CreatedAtColumn string
	// Horizon says which transactions a processor waits for before it reads past a time, from what
	// CreatedAtColumn holds. Empty (HorizonAuto) decides from the column's default at start-up:
	// HorizonWriters for clock_timestamp(), HorizonTransactions for anything else. Set it for an
	// application that writes created_at itself.
	Horizon Horizon
	// KeyColumn, when set, is passed to handlers as Record.Key (for example the aggregate id, used as the
	// Pub/Sub ordering key). Empty means "aggregate_id" when the table has such a column, else none.
	KeyColumn string
	// Partition, when set, narrows the source to one partition of a partitioned process: the rows whose
	// key column hashes to Partition.Index of Partition.Count. NewPartitioned sets it for each partition;
	// set it yourself only to read a single partition.
	Partition *cursor.Partition
	// Columns are the columns selected for each record, in this order. Empty means, for a struct record
	// type scanned by name (no ScanFunc), the struct's columns (db tags, else field names); otherwise all
	// of the table's columns, in table order. Either way a missing column is an error at start-up.
	Columns []string
	// TraceColumn is the column holding each row's W3C traceparent, written by the application with the
	// row (see the traceparent package): each delivery is then traced as a continuation of the
	// application's write. Empty means "traceparent" when the table has such a column, else none.
	TraceColumn string
	// TraceStateColumn is the column holding each row's W3C tracestate, read with TraceColumn. Empty means
	// "tracestate" when the table has such a column, else none.
	TraceStateColumn string
}

// Horizon says which transactions a processor waits for before it reads past a time: the ones that could
// still commit rows dated before it. See the package documentation, "The horizon".
type Horizon = source.Horizon

const (
	// HorizonAuto decides at start-up from the created_at column's default: HorizonWriters for
	// clock_timestamp(), HorizonTransactions for any other default, for none, and for an expression it does
	// not know.
	HorizonAuto = source.HorizonAuto
	// HorizonWriters is for a created_at that is the time of the insert itself (clock_timestamp()): the
	// processor waits only for the transactions that write to the source table. Refused for a column
	// whose default is a transaction-time function, since rows taking that default would be skipped.
	HorizonWriters = source.HorizonWriters
	// HorizonTransactions is for a created_at that may be as early as the start of its transaction or
	// statement (now(), current_timestamp, transaction_timestamp(), statement_timestamp()): the processor
	// waits for every transaction of the database that could still insert. Safe for any created_at set by
	// the database; the price is that any long transaction in the database holds the stream.
	HorizonTransactions = source.HorizonTransactions
)

// ParseHorizon reads "auto", "writers" or "transactions", as the CLI's --horizon takes them.
func ParseHorizon(s string) (Horizon, error) { return source.ParseHorizon(s) }

// ErrInvalidSource is wrapped by every error about a source that cannot be read as configured: a missing
// table, column or index, or a column of the wrong type. Retrying does not help; fix the configuration.
var ErrInvalidSource = source.ErrInvalidSource

// spec is the source as the machinery takes it: the same fields, so that a field added to one and not
// the other fails to compile.
func (s Source) spec() source.Spec { return source.Spec(s) }
