package inordertype

import "fmt"

// Source names the table a process reads and the columns that order it. It is the one description of a
// source: a processor is configured with it (processor.Config.Source), and its cursor row records the
// part that status, lag and operator actions need (cursor.Info.Source). Each field says whether the cursor
// row records it; a Source read back from a cursor row has the others empty.
type Source struct {
	// Table is the source table, optionally schema-qualified ("bookings", "sales.bookings"); quote parts
	// that need it as in SQL ("\"Bookings\""). Plain and partitioned tables are supported. Required.
	// The cursor row records it schema-qualified, as the catalog resolved it, so that an operator action
	// reads the table the process read whatever search_path it runs with.
	Table string
	// IDColumn is the column that breaks ties on CreatedAtColumn; together they identify a row. Its type
	// must be smallint, integer, bigint, uuid, text or varchar. Empty means "id". Recorded in the cursor
	// row.
	IDColumn string
	// CreatedAtColumn orders the table; timestamptz (recommended) or timestamp, best with DEFAULT
	// clock_timestamp(). Empty means "created_at". Recorded in the cursor row.
	CreatedAtColumn string
	// Horizon says which transactions a processor waits for before it reads past a time, from what
	// CreatedAtColumn holds. Empty (HorizonAuto) decides from the column's default at start-up:
	// HorizonWriters for clock_timestamp(), HorizonTransactions for anything else. Set it for an
	// application that writes created_at itself. Not recorded in the cursor row: it concerns reading
	// ahead of the position, never where the position is.
	Horizon Horizon
	// KeyColumn, when set, is passed to handlers as Record.Key (for example the aggregate id, used as the
	// Pub/Sub ordering key), and splits a partitioned process. Empty means "aggregate_id" when the table
	// has such a column, else none. The cursor row records the column as resolved, so that status shows
	// it and an operator action on a partition splits the table by the column the process used.
	KeyColumn string
	// Partition, when set, narrows the source to one partition of a partitioned process: the rows whose
	// key column hashes to Partition.Index of Partition.Count. processor.NewPartitioned sets it for each
	// partition; set it yourself only to read a single partition. Nil when the process is not
	// partitioned. Recorded in the cursor row.
	Partition *Partition
	// Columns are the columns selected for each record, in this order. Empty means, for a struct record
	// type scanned by name (no ScanFunc), the struct's columns (db tags, else field names); otherwise all
	// of the table's columns, in table order. Either way a missing column is an error at start-up. Not
	// recorded in the cursor row: what a handler receives is no operator action's business.
	Columns []string
	// TraceColumn is the column holding each row's W3C traceparent, written by the application with the
	// row (see the traceparent package): each delivery is then traced as a continuation of the
	// application's write. Empty means "traceparent" when the table has such a column, else none. Not
	// recorded in the cursor row.
	TraceColumn string
	// TraceStateColumn is the column holding each row's W3C tracestate, read with TraceColumn. Empty means
	// "tracestate" when the table has such a column, else none. Not recorded in the cursor row.
	TraceStateColumn string
}

// Partition is one of Count streams a partitioned process is split into (processor.NewPartitioned): the
// rows whose key column, as text, hashes (hashtextextended, as hash partitioning does) to Index modulo
// Count, so that one key always lands in one partition and keeps its order. Rows whose key is NULL all
// land in one partition. Its cursor row is named "<process>#<Index>/<Count>"; cursor.Process groups such
// rows with their process.
type Partition struct {
	// Index is the partition's number, from 0 to Count-1.
	Index int
	// Count is how many partitions the process is split into; at least 1. Changing it moves keys between
	// partitions, so only an operator's repartition (cursor.Repartition), on a drained process, does.
	Count int
}

// Horizon says which transactions a processor waits for before it reads past a time: the ones that could
// still commit rows dated before it. A row becomes visible when its transaction commits, but its
// created_at is set earlier, so a reader that trusted created_at alone would skip the rows of slow
// transactions. See processor's package documentation, "The horizon".
type Horizon string

const (
	// HorizonAuto decides at start-up from the created_at column's default: HorizonWriters for
	// clock_timestamp(), HorizonTransactions for any other default, for none, and for an expression it does
	// not know. A processor switches to HorizonTransactions for good when the default changes while it
	// runs to one that HorizonWriters would skip rows of.
	HorizonAuto Horizon = ""
	// HorizonWriters is for a created_at that is the time of the insert itself (clock_timestamp()): the
	// processor waits only for the transactions that write to the source table. Refused for a column
	// whose default is a transaction-time function, since rows taking that default would be skipped.
	HorizonWriters Horizon = "writers"
	// HorizonTransactions is for a created_at that may be as early as the start of its transaction or
	// statement (now(), current_timestamp, transaction_timestamp(), statement_timestamp()): the processor
	// waits for every transaction of the database that could still insert. Safe for any created_at set by
	// the database; the price is that any long transaction in the database holds the stream.
	HorizonTransactions Horizon = "transactions"
)

// ParseHorizon reads "auto" (or ""), "writers" or "transactions", as the CLI's --horizon takes them.
func ParseHorizon(s string) (Horizon, error) {
	switch Horizon(s) {
	case "auto", HorizonAuto:
		return HorizonAuto, nil
	case HorizonWriters, HorizonTransactions:
		return Horizon(s), nil
	}
	return "", fmt.Errorf("horizon %q is none of auto, writers and transactions", s)
}
