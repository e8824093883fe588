package inordertype

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
	// CreatedAtColumn is the time each record carries (handlers.Record.CreatedAt): timestamptz
	// (recommended) or timestamp, whoever writes it, the application's clock included. It orders the
	// table too, unless the table has inorder's insert clock (HorizonClock), which then orders it and
	// leaves created_at to mean what the application says. Empty means "created_at". Recorded in the
	// cursor row.
	CreatedAtColumn string
	// Horizon says what a processor trusts to know that no row can still commit behind its position.
	// Empty (HorizonAuto) is HorizonClock, inorder's own insert clock, when the table has it; a table
	// without it is refused at start-up with the one command that adds it (inorder migrate --table), since
	// a created_at written by the application can be earlier than rows already read. HorizonWriters and
	// HorizonTransactions are the explicit opt-ins for a table without the clock whose created_at the
	// database always sets. Recorded in the cursor row as it was resolved (never HorizonAuto), since what
	// orders the table is part of what a position means.
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
	// Where, when set, is a filter: a SQL boolean expression over the table's columns, named unqualified
	// ("type LIKE 'payment.%'"), and the process reads only the rows it keeps. The rows it passes over
	// cost no handler call and are not read again: the position moves past them up to the horizon.
	// Order per key and the no-skip promise hold for the rows it keeps. It must be an expression a partial
	// index could have as its predicate: IMMUTABLE functions and operators only, no subquery, no `;`,
	// comment or dollar sign; a partial index on the table's order with it as its predicate serves a
	// selective filter. It is checked at start-up, and a process refuses to start with a filter other than
	// the one its cursor row recorded: it is part of what the position means. Empty means every row.
	Where string
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

// Horizon says how a processor tracks what it has seen: which time orders the table, and which
// transactions it waits for before it reads past a time, the ones that could still commit rows dated
// before it. A row becomes visible when its transaction commits, but its time is set earlier, so a reader
// that trusted the time alone would skip the rows of slow transactions. See processor's package
// documentation, "The horizon". Status calls it the process's tracking.
type Horizon string

const (
	// HorizonAuto is HorizonClock when the table has inorder's insert clock. A table without it is
	// refused at start-up, naming the command that adds it, unless HorizonWriters or HorizonTransactions
	// is set: whatever created_at's default says, an application may write the column itself (an ORM
	// does), with a clock inorder cannot see.
	HorizonAuto Horizon = ""
	// HorizonClock orders the table by inorder's insert clock: a column, inorder_at, that a trigger
	// added by `inorder migrate --table` (migrations.AddClock) sets to the database's clock at every
	// insert, whatever the insert says, so no application clock and no ORM can put a row behind the
	// position. The processor waits only for the transactions writing to the table, as HorizonWriters
	// does: a pg_dump or a report never holds the stream. Rows older than the clock, which have no
	// inorder_at, are ordered by their created_at, before every row that has one. Records still carry
	// created_at; their order is the order of their inserts by the database's clock, which for writers of
	// one key that serialise on a row lock is their causal order.
	HorizonClock Horizon = "clock"
	// HorizonWriters is an opt-in for a table without the insert clock whose created_at is always the
	// time of the insert itself (clock_timestamp()), never written by the application: the processor
	// orders by created_at and waits only for the transactions that write to the source table. Refused
	// for a column whose default is a transaction-time function, since rows taking that default would be
	// skipped; a row whose created_at the application wrote earlier than the position is skipped.
	HorizonWriters Horizon = "writers"
	// HorizonTransactions is an opt-in for a table without the insert clock whose created_at is always
	// set by the database, as early as the start of its transaction or statement (now(),
	// current_timestamp, transaction_timestamp(), statement_timestamp()): the processor orders by
	// created_at and waits for every transaction of the database that could still insert. The price is
	// that any long transaction in the database, a pg_dump included, holds the stream; a row whose
	// created_at the application wrote is skipped when it is earlier than the position.
	HorizonTransactions Horizon = "transactions"
)
