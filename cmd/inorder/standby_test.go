package main

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/migrations"
)

// TestAStandbyIsNamedAsOne points migrate and run at a streaming standby of a migrated primary, as a URL
// copied from the replica's host would: each exits saying that the server, by its address, is a standby
// (in recovery) and to point the URL at the primary, rather than only that a statement could not write in
// a read-only transaction.
func TestAStandbyIsNamedAsOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Config{Settings: map[string]string{
		"max_connections": "20", "shared_buffers": "16MB", "fsync": "off", "synchronous_commit": "off",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	code, _, stderr := runBinary(t, []string{"DATABASE_URL=" + primary.URL("postgres")}, "migrate")
	require.Zero(t, code, stderr)
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE bookings (id bigserial PRIMARY KEY,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()); CREATE INDEX ON bookings (created_at, id)`)
	require.NoError(t, err)
	require.NoError(t, migrations.AddClock(ctx, conn, "bookings", migrations.ClockOpts{}))
	require.NoError(t, conn.Close(ctx))
	standby, err := primary.StartStandby(ctx)
	if errors.Is(err, pgcluster.ErrNoBaseBackup) {
		t.Skipf("a standby needs pg_basebackup: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	onStandby, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = onStandby.Close(ctx) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		require.NoError(c, onStandby.QueryRow(ctx, "SELECT count(*) FROM bookings").Scan(&n))
	}, 30*time.Second, 20*time.Millisecond, "the standby has replayed the table")

	server := net.JoinHostPort("127.0.0.1", strconv.Itoa(standby.Port()))
	env := []string{"DATABASE_URL=" + standby.URL("postgres")}
	for _, args := range [][]string{{"migrate"}, runArgs()} {
		code, stdout, stderr := runBinary(t, env, args...)
		require.Equal(t, 1, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "the server at "+server+" is a standby (in recovery), which takes no writes: "+
			"point --database-url (DATABASE_URL) at the primary", "%v", args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	}
}

// TestAReadOnlySessionIsNamed runs on a database whose sessions are read-only by default
// (default_transaction_read_only, which a DBA sets on a database or a role): run says which setting
// refuses its writes.
func TestAReadOnlySessionIsNamed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, "ALTER DATABASE "+pgx.Identifier{b.db.Name}.Sanitize()+" SET default_transaction_read_only = on")
	code, stdout, stderr := runBinary(t, b.env, runArgs()...)
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "(SQLSTATE 25006): the session is read-only: default_transaction_read_only is on for the database or the role")
	require.NotContains(t, stderr, "standby")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
}
