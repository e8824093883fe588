package processor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
)

// TestATransactionalHandlerCommitsDurably: the cursor transaction of a transactional handler keeps the
// database's synchronous_commit whatever SynchronousCommit says: its writes are the application's own,
// which others may act on as soon as they commit. (A plain handler's positions commit with it off; see
// store's lock statement test and the fault suite's server_crash scenario.)
func TestATransactionalHandlerCommitsDurably(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sync bool
		want string
	}{
		{name: "default", want: "on"},
		{name: "SynchronousCommit", sync: true, want: "on"}, // the database's own setting
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The test server runs with synchronous_commit off; this database's sessions get on.
			b.db.Exec(t, "ALTER DATABASE "+pgx.Identifier{b.db.Name}.Sanitize()+" SET synchronous_commit = on")
			b.insert(t, 1)
			var mu sync.Mutex
			var got []string
			b.cfg.Handler = nil
			b.cfg.SynchronousCommit = tc.sync
			b.cfg.TxHandler = handlers.TxHandlerFunc[event](func(ctx context.Context, tx pgx.Tx, _ *handlers.Record[event]) error {
				var v string
				if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
					return err
				}
				mu.Lock()
				got = append(got, v)
				mu.Unlock()
				return nil
			})
			start(t, b.cfg)
			waitFor(t, "the record", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
			require.Equal(t, []string{tc.want}, got)
		})
	}
}
