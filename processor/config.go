package processor

import (
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
)

// Checkpoint says when an advanced position becomes durable.
type Checkpoint string

const (
	// CheckpointRecord commits the position after every record: a crash redelivers at most the record in
	// flight. It costs one commit per record.
	CheckpointRecord Checkpoint = "record"
	// CheckpointBatch commits the position once per batch: a crash redelivers up to a batch, and the
	// stream moves several times faster.
	CheckpointBatch Checkpoint = "batch"
)

// Config configures a Processor. Process, Source.Table, one of Handler or TxHandler, and either Client or
// ClientConfig.ConnConfig are required; every other field has a documented default.
type Config[T any] struct {
	// Process names the stream and its cursor row, for example "booking_sms_outbox".
	Process string
	// Client, when set, runs the processor on the connections of the client's instance, shared with its
	// other processors (see Client): the database, the instance, the credentials and the database timeout
	// are the client's.
	Client *Client
	// ClientConfig configures, for a processor given no Client, the Client it makes for itself when it runs
	// and closes when it stops: every connection of the processor is that client's, as with a shared one.
	// Its ConnConfig (the database to read from) is then required, and its Instance, BeforeConnectFunc and
	// DatabaseTimeout are the processor's; its MaxConns zero means 2, a session and one connection to work
	// on (for a Partitioned runner, one more per slot). With a Client leave it zero: it may name the
	// client's database and instance, and is refused when it says anything else.
	ClientConfig ClientConfig
	// Source is the table and the columns that order it.
	Source inordertype.Source

	// Handler receives each record. It may also implement handlers.AsyncHandler (several records in
	// flight, settled in order) and handlers.Flusher.
	Handler handlers.Handler[T]
	// TxHandler receives each record with the transaction that moves the position, for exactly-once
	// writes to the same database. Set either Handler or TxHandler.
	TxHandler handlers.TxHandler[T]

	// ScanFunc turns one row into a T. The row holds Source.Columns. Nil means pgx.RowToStructByName[T]
	// for struct types, and the generic column-ordered form for handlers.Row.
	ScanFunc func(row pgx.CollectableRow) (T, error)

	// BatchSize bounds the records read per batch; every read is bounded. Zero means adaptive: a batch
	// reads up to 100 records while the stream keeps up, so that a live stream's
	// records are not held behind many others, and the bound doubles after every batch that came back
	// full (a backlog), up to 4000, where each batch's round trips weigh little
	// against its records; the first batch that comes back short brings it back. A batch's position is
	// committed with the statements that lock the row for the next one, so a backlog costs two round trips
	// to the database per batch whatever its size. With MaxInFlight above 1, a batch holds at least sixteen
	// windows, so that the window drains (the records in flight at the end of a batch finishing before the
	// next read) once per sixteen windows at most.
	BatchSize int
	// BatchBytes bounds the bytes of a batch as well as BatchSize bounds its records, so that a backlog of
	// big records (documents of a megabyte, say) is read a few at a time and what the processor holds is
	// sized by it: about three times BatchBytes (a batch delivered, the next read ahead, and what the
	// handler encodes), or three times the largest record where that is larger, plus a constant. A record
	// larger than BatchBytes is read and delivered alone, never refused for its size. Zero means
	// 8 MiB; see docs/operating.md for what to size a container for.
	BatchBytes int
	// MaxInFlight is how many records a Handler may be given at once, in order per key (Record.Key, from
	// Source.KeyColumn): records of one key go one at a time in (created_at, id) order, records of
	// different keys go together, and a record without a key waits for every record before it and holds
	// every record after it. The position is the end of the contiguous prefix of records that succeeded,
	// so a failing record still halts the stream on it; records of other keys after it that had succeeded
	// are delivered again (with the same idempotency key) once it goes through or is skipped, and a crash
	// delivers again at most MaxInFlight records. The Handler must be safe for concurrent use. Zero or 1
	// means one record at a time. Not for a TxHandler, and an AsyncHandler keeps its own window.
	MaxInFlight int
	// PollInterval is the wait when there is nothing to read or another instance holds the cursor, and
	// the fallback when the probe cannot help (see ProbeInterval). Zero means 200ms.
	PollInterval time.Duration
	// ProbeInterval is the longest wait between probes while there is nothing to read: a probe is one
	// index-only statement asking whether any row lies after the position, and only a yes runs a batch,
	// so a new row is delivered within a few milliseconds without the cost of a batch (pg_locks and the
	// cursor lock) at that rate. Right after records were handled it probes after 2ms, doubling up to
	// ProbeInterval; a stream with nothing for 10s probes at four times it. A negative value turns probing
	// off: the processor then waits PollInterval. Zero means 25ms.
	ProbeInterval time.Duration
	// InsertLatency is a safety margin subtracted from the horizon for clock steps (and, for transaction
	// time, the microseconds between a statement's arrival and its transaction's lock). It is not what keeps
	// rows from being skipped (tracking transactions is); keep it small. Zero means 5ms,
	// or 1ms on a table with the insert clock, which stamps a row only after its transaction's lock is
	// there to be seen, so that the margin covers the clock stepping back alone (see docs/horizon.md).
	InsertLatency time.Duration
	// Checkpoint says when the position becomes durable. Empty means CheckpointRecord.
	Checkpoint Checkpoint
	// StartFrom is where a process without a cursor row starts: inordertype.StartFromBeginning,
	// inordertype.StartFromNow or inordertype.StartFromTime. It has no default for a table that already has rows: a
	// new process name (a typo beside the real one) would deliver the whole table again, so Run refuses to
	// register one without it (StartFromError), naming the processes that already read the table. On an
	// empty table the zero value starts at the beginning. An existing process keeps its position whatever
	// StartFrom says.
	StartFrom inordertype.StartFrom

	// SynchronousCommit makes every position commit wait for its WAL flush. By default a position (and
	// what commits with it: the halt state, parked records) commits with synchronous_commit = off, so that
	// on a disk where a flush costs a millisecond or more the stream goes at the sink's speed, not the
	// disk's. Nothing is skipped either way: a crash of inorder loses nothing (the commit is in Postgres),
	// and a crash of Postgres (or a failover, since such a commit does not wait for a synchronous standby
	// either) may take back the last positions, usually the last few hundred milliseconds, whose records are
	// then delivered again. Set it when a sink must never see a record twice after a server crash beyond
	// the record in flight. A TxHandler's commits always wait for their flush, whatever this says: they
	// carry the application's own writes, which others may read and act on as soon as they commit.
	SynchronousCommit bool

	// OnHalt says what a record that would halt the stream does: refused by the sink (handlers.Permanent),
	// or failing for longer than HaltAfter. Empty (OnHaltHalt) halts the stream on it, every key waiting,
	// until it goes through or an operator skips it. OnHaltPark parks its key instead: the record is
	// stored as parked, the position moves past it, every later record of the key is parked behind it
	// without reaching the handler, and the other keys go on. cursor.Redrive delivers a key's parked
	// records in order and unparks it. A record without a key halts the stream either way.
	OnHalt OnHalt

	// RetryMin and RetryMax bound the exponential backoff between attempts at a failing record. Zero means
	// 1s and 1m. Permanent failures (handlers.Permanent) are retried at RetryMax.
	RetryMin, RetryMax time.Duration
	// HaltAfter is how long a record may fail with errors that may pass (a 5xx, a timeout) while the stream
	// counts as retrying, before it counts as halted: a warning is logged when retrying begins, an error
	// when the stream halts, and the inorder_halted metric (and the alert on it) only sees the latter. A
	// permanent failure (handlers.Permanent) halts at once. Either way the record is retried until it goes
	// through or an operator skips it; the state is what people are told. It is checked at each failed
	// attempt, so a stream counts as halted at most RetryMax after HaltAfter. Zero means 5m.
	HaltAfter time.Duration
	// IdleInTransactionTimeout is set (SET LOCAL) in every cursor transaction; an instance frozen while it
	// holds the cursor row loses its session, and with it the row, after it. Zero means 60s.
	IdleInTransactionTimeout time.Duration
	// Lease is how long an instance owns the process without renewing it. The owner renews it in its batch
	// transactions once a third of it has passed, waiting at most a third of it between batches; another
	// instance takes the process once it has run out. So a frozen or vanished owner is replaced within
	// Lease (within IdleInTransactionTimeout if it froze holding the cursor row, whichever is longer) plus
	// PollInterval; on a direct connection, as soon as its session ends. Ownership through a pooler rests on
	// the lease alone. Zero means 30s.
	Lease time.Duration
	// HandlerTimeout bounds one handler call (and one wait on an async result). It must stay below
	// IdleInTransactionTimeout, since the cursor transaction idles while the handler runs, and below Lease:
	// an owner starts a record only while its lease covers the call (it renews the lease first when it
	// would not), so that a record is never in flight once another instance may have taken the process.
	// Zero means the smaller of half IdleInTransactionTimeout and a third of Lease (10s with the defaults).
	//
	// For a Handler or a TxHandler taking records one at a time, it bounds a silence rather than a length:
	// a call that reports progress (handlers.Progress: the webhook does as its body goes out and its answer
	// comes in) has it counted again from its last report, so that a big record on a slow link is not cut
	// off while its bytes still move. Such a call still ends before the lease it started under stops
	// covering it (less the margin an owner keeps, a tenth of the lease up to a second), and before the
	// cursor transaction could have idled for IdleInTransactionTimeout, whatever it reports: there it is
	// cut off with an error that says which bound it met. A call of the keyed window (MaxInFlight) and an
	// AsyncHandler's send and wait have the fixed bound.
	HandlerTimeout time.Duration
	// ShutdownTimeout bounds how long the record in flight may take to finish after Run's context is
	// done. Zero means 15s.
	ShutdownTimeout time.Duration
	// HoldWarnAfter is how long a writer may hold the horizon before a warning is logged. Zero means 1m.
	HoldWarnAfter time.Duration
	// ReconnectMax caps the backoff between reconnection attempts after the database went away. Zero
	// means 30s.
	ReconnectMax time.Duration

	// Logger receives the processor's logs: one line per change of state (locked, released, held,
	// retrying, halted, resumed, moved by an operator), never one per record; every line carries the
	// process name. The zero value logs at info level as JSON lines to standard error; zerolog.Nop()
	// silences it.
	Logger zerolog.Logger
	// Observer, when set, is told what the processor does (for metrics). Its methods must not block.
	Observer Observer

	// TracerProvider receives a span per delivery attempt, per batch (with its horizon, read and commit
	// as children) and per operator move, following OpenTelemetry's messaging conventions; see the
	// package documentation, "Tracing". Nil means the global provider (otel.GetTracerProvider), which
	// records nothing until the application sets one.
	TracerProvider trace.TracerProvider

	// Listen keeps a connection listening for the insert notifications of the trigger that
	// `inorder migrate --notify TABLE` creates, and wakes the processor at once when rows arrive instead of
	// at its next poll. Polling remains the fallback, and the only mode where LISTEN is unavailable (behind
	// a transaction-mode pooler); a notification never decides what is read. False means poll only.
	Listen bool
}

// checkSigns refuses the negative settings the CLI refuses: zero means the default, a negative value is a
// mistake rather than a request for the default.
func (c *Config[T]) checkSigns() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchSize", int64(c.BatchSize)}, {"BatchBytes", int64(c.BatchBytes)}, {"MaxInFlight", int64(c.MaxInFlight)},
		{"PollInterval", int64(c.PollInterval)}, {"InsertLatency", int64(c.InsertLatency)},
		{"RetryMin", int64(c.RetryMin)}, {"RetryMax", int64(c.RetryMax)}, {"HaltAfter", int64(c.HaltAfter)},
		{"IdleInTransactionTimeout", int64(c.IdleInTransactionTimeout)}, {"Lease", int64(c.Lease)},
		{"HandlerTimeout", int64(c.HandlerTimeout)}, {"ShutdownTimeout", int64(c.ShutdownTimeout)},
		{"HoldWarnAfter", int64(c.HoldWarnAfter)}, {"ReconnectMax", int64(c.ReconnectMax)},
		{"ClientConfig.DatabaseTimeout", int64(c.ClientConfig.DatabaseTimeout)},
		{"ClientConfig.MaxConns", int64(c.ClientConfig.MaxConns)},
	} {
		if f.v < 0 {
			return fmt.Errorf("Config.%s is negative; zero means its default", f.name)
		}
	}
	if c.RetryMin > 0 && c.RetryMax > 0 && c.RetryMax < c.RetryMin {
		return fmt.Errorf("Config.RetryMax (%s) is below Config.RetryMin (%s)", c.RetryMax, c.RetryMin)
	}
	return nil
}

// databaseTimeout is the bound on the processor's exchanges with the database: its Client's
// DatabaseTimeout.
func (c *Config[T]) databaseTimeout() time.Duration {
	if c.Client != nil {
		return c.Client.cfg.DatabaseTimeout
	}
	if c.ClientConfig.DatabaseTimeout > 0 {
		return c.ClientConfig.DatabaseTimeout
	}
	return setting.DefaultDatabaseTimeout
}

// clockInsertLatency is InsertLatency's default on a table with the insert clock.
const clockInsertLatency = time.Millisecond

func (c *Config[T]) withDefaults() {
	if c.BatchBytes <= 0 {
		c.BatchBytes = setting.DefaultBatchBytes
	}
	if c.PollInterval <= 0 {
		c.PollInterval = setting.DefaultPollInterval
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = setting.DefaultProbeInterval
	}
	if c.InsertLatency <= 0 {
		c.InsertLatency = setting.DefaultInsertLatency
	}
	if c.Checkpoint == "" {
		c.Checkpoint = CheckpointRecord
	}
	if c.RetryMin <= 0 {
		c.RetryMin = setting.DefaultRetryMin
	}
	if c.RetryMax <= 0 {
		c.RetryMax = setting.DefaultRetryMax
	}
	if c.HaltAfter <= 0 {
		c.HaltAfter = setting.DefaultHaltAfter
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	if c.IdleInTransactionTimeout <= 0 {
		c.IdleInTransactionTimeout = setting.DefaultIdleInTransactionTimeout
	}
	if c.Lease <= 0 {
		c.Lease = setting.DefaultLease
	}
	if c.HandlerTimeout <= 0 {
		c.HandlerTimeout = setting.DefaultHandlerTimeout(c.IdleInTransactionTimeout, c.Lease)
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = setting.DefaultShutdownTimeout
	}
	if c.HoldWarnAfter <= 0 {
		c.HoldWarnAfter = setting.DefaultHoldWarnAfter
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = setting.DefaultReconnectMax
	}
}
