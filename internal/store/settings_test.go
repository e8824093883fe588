package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
)

// Each timeout a DBA may set is made to fire on the real server, and the error it raises is named by
// store.Setting: the processor's log line says which setting stopped it. transaction_timeout only
// where the server has it (17+). A cancel that is not a timeout's, and a SKIP LOCKED-style refusal, name
// nothing.
func TestTheServersTimeoutsAreNamed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var version int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version))
	db.Exec(t, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")

	// conn connects with the given session settings.
	conn := func(t *testing.T, settings map[string]string) *pgx.Conn {
		cc, err := pgx.ParseConfig(db.URL)
		require.NoError(t, err)
		for k, v := range settings {
			cc.RuntimeParams[k] = v
		}
		c, err := pgx.ConnectConfig(ctx, cc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	// ended waits until the server has ended c's session (it is idle, so nothing else ends it) and
	// returns what the next statement meets.
	ended := func(t *testing.T, c *pgx.Conn) error {
		pid := c.PgConn().PID()
		require.Eventually(t, func() bool {
			var n int
			return db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n) == nil && n == 0
		}, 20*time.Second, 5*time.Millisecond, "the server to end the session")
		_, err := c.Exec(ctx, "SELECT 1")
		return err
	}

	t.Run("statement_timeout", func(t *testing.T) {
		t.Parallel()
		_, err := conn(t, map[string]string{"statement_timeout": "10ms"}).Exec(ctx, "SELECT pg_sleep(5)")
		require.Equal(t, "statement_timeout", store.Setting(err), "%v", err)
		require.ErrorContains(t, store.NameSetting(err), "the server's statement_timeout")
	})
	t.Run("lock_timeout", func(t *testing.T) {
		t.Parallel()
		holder := conn(t, nil)
		tx, err := holder.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SELECT id FROM t WHERE id = 1 FOR UPDATE")
		require.NoError(t, err)
		_, err = conn(t, map[string]string{"lock_timeout": "10ms"}).Exec(ctx, "SELECT id FROM t WHERE id = 1 FOR UPDATE")
		require.Equal(t, "lock_timeout", store.Setting(err), "%v", err)
		_, err = conn(t, nil).Exec(ctx, "SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT")
		require.Error(t, err)
		require.Empty(t, store.Setting(err), "NOWAIT is not a timeout: %v", err)
	})
	t.Run("idle_session_timeout", func(t *testing.T) {
		t.Parallel()
		err := ended(t, conn(t, map[string]string{"idle_session_timeout": "50ms"}))
		require.Equal(t, "idle_session_timeout", store.Setting(err), "%v", err)
		require.True(t, store.IsConnectionError(err), "the session is over: %v", err)
	})
	t.Run("idle_in_transaction_session_timeout", func(t *testing.T) {
		t.Parallel()
		c := conn(t, map[string]string{"idle_in_transaction_session_timeout": "50ms"})
		_, err := c.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		err = ended(t, c)
		require.Equal(t, "idle_in_transaction_session_timeout", store.Setting(err), "%v", err)
		require.True(t, store.IsConnectionError(err), "the session is over: %v", err)
	})
	t.Run("transaction_timeout", func(t *testing.T) {
		t.Parallel()
		if version < 170000 {
			t.Skipf("transaction_timeout is new in PostgreSQL 17; the server is %d", version)
		}
		c := conn(t, map[string]string{"transaction_timeout": "50ms"})
		_, err := c.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		err = ended(t, c)
		require.Equal(t, "transaction_timeout", store.Setting(err), "%v", err)
		require.True(t, store.IsConnectionError(err), "the session is over: %v", err)
	})
	t.Run("a cancel of inorder's own", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := conn(t, nil).Exec(cctx, "SELECT pg_sleep(5)")
		require.Error(t, err)
		require.Empty(t, store.Setting(err), "%v", err)
	})
}
