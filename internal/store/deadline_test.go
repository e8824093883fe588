package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/internal/store"
)

// TestAnAnswerStillComingIsNotCutOff reads an answer three times the size the link passes in the
// repository's timeout, on a dedicated connection and on one lent by the shared pool: the read is not cut
// off while its bytes keep coming, and an exchange that then receives nothing is, as the database not
// answering.
func TestAnAnswerStillComingIsNotCutOff(t *testing.T) {
	t.Parallel()
	const timeout, rate = 500 * time.Millisecond, 1_000_000
	size := 3 * int(timeout.Seconds()*rate)
	for _, shared := range []bool{false, true} {
		t.Run("shared="+strconv.FormatBool(shared), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, cfg := setup(t)
			proxy, err := tcpproxy.Start(tcpproxy.Config{
				Target: cfg.ConnConfig.Host + ":" + strconv.Itoa(int(cfg.ConnConfig.Port))})
			require.NoError(t, err)
			t.Cleanup(func() { _ = proxy.Close() })
			cc, err := pgx.ParseConfig(proxy.URL(db.URL))
			require.NoError(t, err)
			cfg.ConnConfig, cfg.Timeout = cc, timeout
			var sh *store.Shared
			if shared {
				sh, err = store.NewShared(store.SharedConfig{ConnConfig: cc, MaxConns: 2, Timeout: timeout})
				require.NoError(t, err)
				t.Cleanup(sh.Close)
				cfg.Shared = sh
			}
			r, err := store.New(sh).Open(ctx, "big_answers", cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Release(context.Background()) })
			// Closed first too: pgx drains a connection it gave up until the server's end comes (15s at most),
			// which the proxy's close brings to a swallowed one.
			t.Cleanup(func() { _ = proxy.Close() })
			conn, err := r.Session.Conn(ctx)
			require.NoError(t, err)

			proxy.Trickle(rate)
			began := time.Now()
			ectx, cancel := r.Session.Bounded(ctx)
			var got string
			err = conn.QueryRow(ectx, "SELECT repeat('x', $1)", size).Scan(&got)
			cancel()
			took := time.Since(began)
			require.NoError(t, err, "an answer still coming after %s", took)
			require.Equal(t, strings.Repeat("x", size), got)
			require.Greater(t, took, 2*timeout, "the answer took longer than the timeout")
			t.Logf("an answer of %d bytes took %s", size, took.Round(time.Millisecond))

			proxy.Swallow()
			began = time.Now()
			ectx, cancel = r.Session.Bounded(ctx)
			_, err = conn.Exec(ectx, "SELECT 1")
			cancel()
			require.Error(t, err)
			require.True(t, store.Unanswered(ctx, err), "a silence counts as the database not answering: %v", err)
			require.GreaterOrEqual(t, time.Since(began), timeout)
			require.True(t, r.Session.Broken(err), "the connection counts as dead")
			if shared {
				r.Session.Detach()
			}
		})
	}
}
