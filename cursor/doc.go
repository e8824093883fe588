// Package cursor is a process's cursor as users and operators see it: where the process stands in its
// source table (Position), whether it is halted on a failing record and why (Halt), who works it, and the
// operator actions that change it, with their safety rules inside them.
//
// # Status
//
// Read reads every process, with its streams' cursor rows, without disturbing running processors: position,
// halt and hold state, pause, the instance that owns it and how many are connected, and its Status, decided
// as `inorder status` decides it (for a running stream, Read looks whether a record is behind, which tells
// running from idle). Info.Measure counts the records after the position into the Info.
//
// # Operator actions
//
// Skip, Rewind, Pause, Resume and Repartition change a cursor row on behalf of an operator, from the CLI
// or from a service's own admin endpoint, on a connection, a pool or a transaction (DB). Each locks the
// process's row (waiting for a running batch to finish, within ActionOpts.Wait), checks its rules, makes
// the change and writes an audit entry, all in one transaction, and returns the entry or an error. An
// error a caller may branch on wraps a sentinel (ErrUnknownProcess, ErrNotHalted, ErrWrongRecord, ErrBusy,
// ...); any other refusal says what to do first. No action moves a position past a record that was not
// delivered, except Skip, which moves past exactly the record the stream is halted on, with a reason.
// Audit lists the entries.
//
// A process run with processor.OnHaltPark parks a failing key rather than halting: Parked lists the parked
// keys, Redrive has the owning processor deliver them in order, and Skip drops a parked key's first record
// and redrives the rest. A key's parked records keep their rows from Prune, and Repartition and Forget
// refuse while keys are parked (ErrParked).
//
// # Retention
//
// Prune deletes the rows of a source table that every process reading it has durably passed, in short
// batches beside writers and running processors, with an audit entry per process; a dry run says how
// many rows and up to where. Forget removes a retired process's cursor rows, so that it no longer holds
// back a prune (or starts afresh when run again).
//
// # Ownership
//
// Which instance works a process, and how the row is locked batch by batch, is the processor's business
// (see package processor); status shows its result.
package cursor
