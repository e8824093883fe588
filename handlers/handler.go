package handlers

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Record is one source row on its way to a handler, with the metadata a sink needs to be idempotent and
// ordered.
type Record[T any] struct {
	// Process is the name of the process delivering the record.
	Process string
	// ID is the record's id column as text. Together with Process it identifies a delivery for
	// idempotency keys: a redelivered record carries the same ID.
	ID string
	// CreatedAt is the record's created_at column, as the application or the database wrote it. On a table
	// with the insert clock, which orders the stream, it is not the first half of the record's position;
	// without it (the writers or transactions opt-in) it is.
	CreatedAt time.Time
	// Key is the key column's value as text (for example an aggregate id), or "" when the process has no
	// key column. Sinks with per-key ordering (Pub/Sub ordering keys) use it.
	Key string
	// Attempt counts deliveries of this record by this stream: 1 the first time, more on retries after a
	// failure (across instances, since the attempts are kept in the cursor row).
	Attempt int
	// Value is the row itself, scanned into the caller's type.
	Value T
}

// Handler receives records one at a time, in order. Returning nil lets the position move past the record;
// returning an error stops the stream on it (retrying, or halted for a Permanent error or after the
// processor's HaltAfter): the processor records the error in the cursor row and calls Handle again for the
// same record after a backoff, forever unless an operator skips it.
//
// Handle must not return before the record's effect is durable at the sink (the HTTP response received,
// the message acknowledged): once it returns nil, the record may never be delivered again.
type Handler[T any] interface {
	Handle(ctx context.Context, rec *Record[T]) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[T any] func(ctx context.Context, rec *Record[T]) error

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, rec *Record[T]) error { return f(ctx, rec) }

// TxHandler is a handler whose writes belong in the database transaction that moves the position: the
// read-model projector of an event-sourced system. The processor calls HandleTx with that transaction, so
// the handler's writes and the new position commit together or not at all. That is exactly-once for
// effects in the same database.
//
// With a per-batch checkpoint each record runs inside a savepoint, so a failing record rolls back its own
// writes and keeps those of the records before it.
type TxHandler[T any] interface {
	HandleTx(ctx context.Context, tx pgx.Tx, rec *Record[T]) error
}

// TxHandlerFunc adapts a function to a TxHandler.
type TxHandlerFunc[T any] func(ctx context.Context, tx pgx.Tx, rec *Record[T]) error

// HandleTx calls f.
func (f TxHandlerFunc[T]) HandleTx(ctx context.Context, tx pgx.Tx, rec *Record[T]) error {
	return f(ctx, tx, rec)
}

// TxBatchHandler is a TxHandler that can also take the records of a batch at once, so that a read-model
// projection writes them with one statement (an INSERT ... ON CONFLICT over all of them) instead of one
// per record. The processor calls HandleTxBatch with the transaction that moves the position past the
// whole batch, in a savepoint, and the read model and the position commit together: a crash leaves both
// before the batch or both after it. The records are in (created_at, id) order and must be applied in
// that order (a later record of a key wins). If HandleTxBatch fails, its savepoint is rolled back and the
// processor delivers the same records one at a time with HandleTx, to find the record that fails: the
// records before it commit, and the stream halts (or parks the key) on it as usual.
type TxBatchHandler[T any] interface {
	TxHandler[T]
	HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*Record[T]) error
}

// Flusher is implemented by handlers that buffer output. The processor calls Flush before it makes a
// position durable, so nothing buffered is ever behind the position. An error from Flush counts as a
// failure of every record since the last durable position: they are delivered again.
type Flusher interface {
	Flush(ctx context.Context) error
}

// AsyncHandler is implemented by handlers that can keep several records in flight and still settle them
// in order, such as publishing to Pub/Sub with ordering keys. The processor calls Send for records in
// order, keeps at most MaxInFlight results outstanding, and waits on them in the order they were sent: the
// position moves past a record only after its Wait returned nil and every earlier one did too. When a
// Send or a Wait fails, the processor sends nothing more, waits out the results already in flight
// (within one handler timeout for all of them) without counting them, and delivers again from the failed
// record: a handler may rely on that to know when it is safe to resume a paused ordering key. The context
// given to Send ends when Send returns; Wait gets its own.
type AsyncHandler[T any] interface {
	// Send starts delivering rec. An error returned here counts as the record's failure.
	Send(ctx context.Context, rec *Record[T]) (Result, error)
	// MaxInFlight is how many results may be outstanding at once; values below 1 mean 1.
	MaxInFlight() int
}

// Result is the outcome of one record sent by an AsyncHandler.
type Result interface {
	// Wait blocks until the sink has settled the record and reports whether it was accepted.
	Wait(ctx context.Context) error
}

// ColumnReader is implemented by handlers of handlers.Row records that read columns by name: a webhook's
// body column, a Kafka or Pub/Sub payload, topic or type column named in their configuration. A processor
// checks at start, before it registers a process, that the columns it selects include every one of them,
// so that a typo in a column name stops the start with the table's columns in the message, rather than
// halting the stream on its first record.
type ColumnReader interface {
	// ReadsColumns returns the columns the handler needs in every record. A column it reads only when
	// present (a payload column by default, say) is not one of them.
	ReadsColumns() []string
}
