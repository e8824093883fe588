// Package migrations holds the SQL that inorder needs in the database, versioned and embedded in the
// binary.
//
// # Applying
//
// Migrate applies what is missing in one transaction and records each version in
// inorder.schema_migration. It takes a transaction-level advisory lock first, so every instance of a
// service may call it at start-up: one applies, the others wait and find nothing to do.
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
