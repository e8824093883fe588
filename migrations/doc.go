// Package migrations holds the SQL that inorder needs in the database, versioned and embedded in the
// binary.
//
// # Applying
//
// Migrate applies what is missing in one transaction and records each version in
// inorder.schema_migration. It takes a transaction-level advisory lock first, so every instance of a
// service may call it at start-up: one applies, the others wait and find nothing to do.
//
// A migration may need a table's ACCESS EXCLUSIVE lock (ALTER TABLE inorder.cursor), and while it waits
// for one every statement of the running processors on that table queues behind it. So each attempt
// waits at most 2s for a lock, rolls back and tries again after a growing pause, until
// the context ends; MigrateWith sets the timeout and hears of each wait.
//
// # Own tooling
//
// Teams that apply schema changes with their own tool take Script (or `inorder migrate --print`) and
// apply the versions they lack.
//
// # Tables
//
// Everything lives in the schema inorder. inorder.cursor has one row per process name: its position (the
// created_at and id of the last record handled), the source it reads, the halt state of a failing record
// and the writer that holds its horizon.
package migrations
