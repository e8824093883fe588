// Package processor moves the rows of a Postgres table to a handler, strictly in the order of their inserts,
// one record at a time, never skipping one.
//
// # Running processes in a program
//
// A Client is the one way to run processes in a program: it owns the instance's connections (MaxConns,
// four by default, however many processes) and its idle probe, and runs every Processor or Partitioned
// runner Added to it; put it in a lifecycle.Group with the signals to stop cleanly on SIGTERM (see
// Example_library). A Processor whose Config.Client is nil makes a Client of its own from
// Config.ClientConfig when it runs (a session and one connection to work on, and the listener's when it
// listens), and closes it when it stops: every connection is a Client's, and processors share nothing
// they were not given.
//
// # The loop
//
// A Processor owns one named process. Each batch it locks the process's cursor row (see package cursor),
// computes the horizon, reads at most BatchSize records after its position and below the horizon in keyset
// order (BatchSize, which adapts to a backlog by default), hands them to the handler one by one, advances
// the position after each success, and unlocks. When there is nothing to read it probes (ProbeInterval):
// one shared, index-only statement asks whether a row lies after its position, and only a yes runs a batch.
// Without the probe, and while another instance owns the process, it waits PollInterval.
//
// # Ownership
//
// Any number of instances may run one process (ClientConfig.Instance names each); one works it at a time. The
// owner holds a lease in the cursor row, renewed in its batch transactions, and every position it writes is
// checked against the lease's token (drawn at random at every change of owner) in the transaction that
// holds the row lock, so an instance whose lease another has taken can never write one. That holds through
// a connection pooler in session or transaction mode (PgBouncer, or a hosted database's pooler; the URL
// then needs default_query_exec_mode=exec or simple_protocol where the pooler keeps no prepared
// statements). A standby takes over when the owner gives the lease up at a clean stop, when the lease runs
// out (Lease), or, on a direct connection, as soon as the owner's session ends. After a reconnect (a server
// restart, a failover to a standby) the processor goes on from the cursor row it finds, and names the
// records it delivered that the server no longer has.
//
// The lease decides even for an owner cut off inside its batch: the owner starts a record only while its
// lease covers the handler call (HandlerTimeout), renewing it by a commit of what it has delivered before
// that stops being so, and a standby that finds the lease run out while the owner's session still holds the
// cursor row ends that session and takes over. A call that reports progress (handlers.Progress) goes on
// past HandlerTimeout while its bytes move, but never past the time the lease it started under covers it.
//
// # Round trips and deadlines
//
// Over a network every statement sent and awaited alone costs a round trip, and a backlog's batch costs
// two: BEGIN, the row lock and the poll of the transactions in flight travel together, as do a batch's
// position, its commit and the next batch's lock and poll; the read is the second. While a backlog's batch
// is delivered, the next one is read below the same horizon. In READ COMMITTED each statement of a
// pipeline still takes its snapshot when it starts, after the one before it has finished, so the horizon's
// rule (the poll before the read, in an earlier statement) holds. Every exchange has a deadline
// (DatabaseTimeout): a connection that a NAT or a load balancer forgot is replaced in seconds, not when
// the kernel gives up a quarter of an hour later. The deadline bounds a silence, the time since the last
// byte came, so that a read of big rows still arriving on a slow link is not taken for a dead connection.
//
// # The horizon
//
// A row becomes visible when its transaction commits, but its time is set earlier, so a reader that
// trusts the time alone skips the rows of slow transactions. The processor reads only below a horizon
// under which every row that will ever commit is already visible. It finds it by watching transactions in
// pg_locks (readable by any role): a transaction absent at some poll can only create rows dated after that
// poll.
//
// The time it reads by is the table's insert clock (HorizonClock, what HorizonAuto requires): a column
// that a trigger sets to the database's clock at every insert, whatever the insert says, added online by
// migrations.AddClock (inorder migrate --table). Neither an application that writes created_at itself
// nor a long transaction elsewhere can then skip a row or hold the stream: only the table's writers are
// watched. A table without it is refused at start-up, unless an opt-in says what created_at holds:
// HorizonWriters for clock_timestamp(), watching the writers, or HorizonTransactions for now() and the
// other transaction-time functions, watching every transaction of the database that could still insert
// (switched to for good when a writers table's default changes while running). A transaction that stays
// open stalls the stream until it ends; the processor records it in the cursor row (status shows it) and
// logs it, warning after HoldWarnAfter. Rows that commit behind the position anyway are counted 30 s after
// their stretch was delivered (cursor.Info.LateRows) and logged, never passed in silence.
//
// # Checkpoints
//
// With CheckpointRecord (the default) every advance commits at once, in the same round trip that locks
// the row for the next record: a crash of the processor delivers at most the record in flight again. With
// CheckpointBatch the position commits once per batch: a crash delivers at most a batch again. A position
// commits without waiting for its WAL flush (see Config.SynchronousCommit), so a crash of Postgres itself
// may deliver again the records of the last positions it had not flushed, usually the last few hundred
// milliseconds; never one is skipped.
//
// # Failures
//
// A handler error stops the stream on its record: the processor keeps what succeeded before it, writes
// the failure (record, error, attempts, since when, the next attempt) into the cursor row, and retries the
// same record with capped exponential backoff, forever. The stream counts as retrying (a warning, the
// inorder_retrying metric) until the record has failed for longer than HaltAfter, or at once for a
// handlers.Permanent error, when it counts as halted (an error line, inorder_halted). Only an operator
// moves past it (`inorder skip`, cursor.Skip, audited), or has it tried again now (`inorder retry`,
// cursor.Retry). A lost database connection is not a failure of the record: the processor reconnects with
// backoff.
//
// # Credentials
//
// Every connection of the processor's Client (its session, its pool, and what the pool makes for the
// listener, a partitioned process's coordinator and the pooler's check) is given first to
// ClientConfig.BeforeConnectFunc, when set, with a copy of its configuration: a password read again where a rotation
// puts it, or a token minted for that connection (an IAM token that lives 15 minutes), or a TLS
// configuration. Once the process has connected, credentials the database refuses (SQLSTATE 28P01 or
// 28000), or that BeforeConnectFunc cannot give, are an outage, not an exit: the processor says so once,
// naming the user and the server (and tells its Observer, ops.Metrics's inorder_credentials_refused),
// and reconnects with backoff, at most a few seconds apart, until they are accepted; the stream then goes
// on by itself. At start-up the same refusal is a mistake, and Run returns it at once.
//
// # Parking
//
// With Config.OnHalt set to OnHaltPark, a record that would halt the stream parks its key instead: the
// record is stored as parked (inorder.parked) and the position moves past it; every later record of the
// key is parked behind it, in order, without reaching the handler; the other keys go on. cursor.Redrive
// has the owner deliver a key's parked records in order, between two batches, then unpark it, so that no
// new record of the key overtakes a parked one. A record without a key halts the stream as without
// parking.
//
// # Tracing
//
// Each delivery attempt is an OpenTelemetry span ("deliver <process>", kind consumer) on
// Config.TracerProvider. When the source row holds the W3C trace context of the application's span that
// wrote it (the traceparent and tracestate columns, or Source.TraceColumn; package traceparent gives
// it), the span is that span's child, and links to it as OpenTelemetry's messaging conventions ask of a
// message's creation context: the request that wrote the row and the delivery end up in one trace. A row
// without one is delivered as a child of its batch's span ("batch <process>"), whose children show the
// horizon, the read and the commit. The attempt's span carries the process, the record id
// (messaging.message.id), the key, the attempt and the source table; a failed attempt has an error
// status, and its fate is an event: retrying, halted or parked. An operator's skip or rewind is a span of
// its own. The handler's context carries the attempt's span, and the sinks in this module propagate it:
// traceparent and tracestate headers on a webhook, Kafka record headers, Pub/Sub attributes. With no
// provider set, nothing is recorded, and the sinks pass the row's own context on.
//
// # Records
//
// Records are scanned into the caller's struct with pgx.RowToStructByName by default (set
// Source.Columns to the struct's columns), or into handlers.Row, the column-ordered generic form the CLI
// uses.
package processor
