package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestUpgradeKeepsALeastPrivilegedRoleWorking: migrations 9 and 11 add inorder.instance and
// inorder.parked, which running instances write. A role that could write cursor rows before the upgrade may write instance rows after
// it, without a grant by hand; a role that could only read them may not.
func TestUpgradeKeepsALeastPrivilegedRoleWorking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, m := range migrations.All() {
		if m.Version >= 9 {
			break
		}
		_, err := conn.Exec(ctx, m.SQL)
		require.NoError(t, err, "migration %d", m.Version)
	}
	runner, reader := db.Name+"_runner", db.Name+"_reader"
	_, err = conn.Exec(ctx, fmt.Sprintf(`
		CREATE ROLE %[1]s; CREATE ROLE %[2]s;
		GRANT SELECT, INSERT, UPDATE ON inorder.cursor TO %[1]s;
		GRANT SELECT ON inorder.cursor TO %[2]s`, runner, reader))
	require.NoError(t, err)
	// The bookkeeping Migrate keeps, as if it had applied 1 to 8.
	_, err = conn.Exec(ctx, `CREATE TABLE inorder.schema_migration (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
		INSERT INTO inorder.schema_migration (version, name) SELECT g, 'before' FROM generate_series(1, 8) g`)
	require.NoError(t, err)

	applied, err := migrations.Migrate(ctx, conn)
	require.NoError(t, err)
	require.Contains(t, applied.Versions, 9)
	for role, want := range map[string]bool{runner: true, reader: false} {
		var may bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'inorder.instance', 'INSERT, UPDATE, DELETE')",
			role).Scan(&may))
		require.Equal(t, want, may, role)
		// Migration 11: the runner parks records, and both read them (status).
		require.NoError(t, conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'inorder.parked', 'INSERT, UPDATE, DELETE')",
			role).Scan(&may))
		require.Equal(t, want, may, role)
		require.NoError(t, conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'inorder.parked', 'SELECT')", role).Scan(&may))
		require.True(t, may, role)
	}
}

// TestMigrateTakesAPoolOrATransaction: Migrate runs on what the cursor actions take. In a transaction it
// commits, or not, with it; through a pool it applies everything once.
func TestMigrateTakesAPoolOrATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t, pgtest.Options{Empty: true})
	last := migrations.All()[len(migrations.All())-1].Version
	applied := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables
			WHERE schemaname = 'inorder' AND tablename = 'schema_migration'`).Scan(&n))
		if n == 0 {
			return 0
		}
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM inorder.schema_migration").Scan(&n))
		return n
	}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := migrations.Migrate(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, last, res.Current)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, applied(), "migrations made in a transaction roll back with it")

	res, err = migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, res.Versions, len(migrations.All()))
	require.Equal(t, len(migrations.All()), applied())
	res, err = migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, res.Versions, "a second call finds nothing to do")
	require.Equal(t, last, res.Current)
}
