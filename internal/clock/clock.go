// Package clock names inorder's insert clock, which migrations.AddClock adds to a source table and the
// source reads it by: the column, the trigger and its function, and the expression of a row's time in its
// position. Both sides take them from here, so that what is added and what is read cannot drift apart.
package clock

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

const (
	// Column is the insert clock's column.
	Column = "inorder_at"
	// Trigger is the name of the trigger that sets Column at every insert.
	Trigger = "inorder_insert_clock"
	// Function is the trigger's function, created by migration 14.
	Function = "inorder.insert_clock"
)

// Expr is the SQL of a row's time in its position on a table with the insert clock, its column
// references prefixed (an alias and its dot, or ""): the clock, or for a row older than the clock its
// created_at column createdAt, of typname typ (timestamptz, or timestamp, read as UTC: AT TIME ZONE with a
// constant zone is immutable, as an index expression must be, where the cast that comparing it with
// timestamptz makes is not).
func Expr(prefix, createdAt, typ string) string {
	ca := prefix + pgx.Identifier{createdAt}.Sanitize()
	if typ == "timestamp" {
		ca = "(" + ca + " AT TIME ZONE 'UTC')"
	}
	return fmt.Sprintf("coalesce(%s%s, %s)", prefix, pgx.Identifier{Column}.Sanitize(), ca)
}
