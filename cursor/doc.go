// Package cursor owns the position of one named process in its source table: which instance works the
// process, where it stands, and why it stopped if it did.
//
// # Ownership
//
// Any number of instances may run a process; one works it at a time. An instance becomes the owner by
// taking a session-level advisory lock keyed by the process name, and keeps it between batches, so the
// work does not hop between instances while they idle. Each batch then locks the process's row in
// inorder.cursor with SELECT ... FOR UPDATE SKIP LOCKED in a short transaction; position updates happen
// in that transaction, so an instance that lost its session can never record a position. The connection
// sets idle_in_transaction_session_timeout, idle_session_timeout and TCP keepalives, so a frozen or
// vanished owner loses the process and a standby takes over.
//
// # One repository per name
//
// A Registry hands out one Repository per process name: asking twice gives the same instance, and no
// method takes a name, so a repository can only touch its own row.
//
// # Operator actions
//
// Skip, Rewind, Pause and Resume change a cursor row on behalf of an operator. They lock the same row
// (waiting for a running batch to finish, within a bound), and write an audit entry in the same
// transaction. List reads every process's state for status without disturbing anyone.
package cursor
