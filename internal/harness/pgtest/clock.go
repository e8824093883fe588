package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/migrations"
)

// AddClock gives table inorder's insert clock, as `inorder migrate --table` does: what a user who
// follows the README has on every source table.
func AddClock(t testing.TB, db *DB, table string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("add the insert clock to %s: %v", table, err)
	}
	defer conn.Close(ctx)
	if err := migrations.AddClock(ctx, conn, table, migrations.ClockOpts{}); err != nil {
		t.Fatalf("add the insert clock to %s: %v", table, err)
	}
}
