package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgtest.DB, store.Config) {
	t.Helper()
	db := pgtest.New(t)
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, store.Config{ConnConfig: cc, IdleInTransactionTimeout: 5 * time.Second, Start: inordertype.StartFromBeginning}
}

func TestOneRepositoryPerNameAndNoOther(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	_, cfg := setup(t)
	ctx := context.Background()
	a, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	again, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.Same(t, a, again, "asking twice for a name gives the same repository")
	other, err := cursors.Open(ctx, "refunds", cfg)
	require.NoError(t, err)
	require.NotSame(t, a, other)
	require.Equal(t, "orders", a.Name())
	elsewhere := cfg
	elsewhere.Instance = "another instance"
	b, err := cursors.Open(ctx, "orders", elsewhere)
	require.NoError(t, err)
	require.NotSame(t, a, b, "another instance of the process is another repository, as in another program")
	require.NoError(t, b.Release(ctx))

	require.NoError(t, a.Claim())
	require.ErrorIs(t, a.Claim(), store.ErrInUse, "two processors in one Go process cannot share a cursor")
	a.Unclaim()

	// No start-up parameter a pooler would refuse: the session is named, nothing else.
	conn, err := a.Session.Conn(ctx)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE source = 'client' ORDER BY name")
	require.NoError(t, err)
	fromClient, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"application_name"}, fromClient)
	// The idle timeout is set in each cursor transaction, and ends with it.
	ok, err := a.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	var idle string
	require.NoError(t, a.Lock.Tx().QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle))
	require.Equal(t, "5s", idle, "the cursor transaction carries its idle timeout")
	require.NoError(t, a.Lock.Unlock(ctx))
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle))
	require.Equal(t, "0", idle, "and it ends with the transaction")

	require.NoError(t, a.Release(ctx))
	_, err = a.Lock.TryLock(ctx)
	require.ErrorIs(t, err, store.ErrReleased)
	fresh, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NotSame(t, a, fresh, "a released name opens anew")
	require.NoError(t, fresh.Release(ctx))
	require.NoError(t, other.Release(ctx))
}

func TestLockIsExclusiveAndRegistrationStartsWhereAsked(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db, cfg := setup(t)
	ctx := context.Background()
	before := time.Now()
	cfg.Start = inordertype.StartFromNow
	cfg.Instance = "first"
	first, err := cursors.Open(ctx, "now_process", cfg)
	require.NoError(t, err)
	cfg.Instance = "second"
	second, err := cursors.Open(ctx, "now_process", cfg)
	require.NoError(t, err)

	ok, err := first.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	pos := first.Position.State().Position
	require.False(t, pos.IsBeginning())
	require.Empty(t, pos.ID, "start from now: after every row created before registration")
	require.WithinDuration(t, before, pos.CreatedAt, time.Minute)

	ok, err = second.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "held elsewhere is an answer, not an error")
	require.NoError(t, first.Lock.Unlock(ctx))
	ok, err = second.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the owner keeps the process between batches")

	require.NoError(t, first.Release(ctx))
	ok, err = second.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the standby takes over as soon as the owner released the process")
	moved := inordertype.Position{CreatedAt: pos.CreatedAt.Add(time.Second), ID: "7"}
	require.NoError(t, second.Position.SetPosition(ctx, moved, 1))
	require.NoError(t, second.Lock.Unlock(ctx))
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT position_id FROM inorder.position WHERE process_name = 'now_process'").Scan(&id))
	require.Equal(t, "7", id)
	require.NoError(t, second.Release(ctx))

	cfg.Start = inordertype.StartFromBeginning
	cfg.Instance = "third"
	third, err := cursors.Open(ctx, "now_process", cfg)
	require.NoError(t, err)
	ok, err = third.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "7", third.Position.State().Position.ID, "an existing process keeps its position whatever StartFrom says")
	require.NoError(t, third.Release(ctx))
}

// TestATakeLostInAFailoverDoesNotMakeTwoOwners: an epoch can be handed out twice. A failover that lost
// the commit by which the first instance took the process leaves the row at the epoch before, with its
// lease run out; the second instance takes it under the same epoch. The first, reconnected, must see that
// the tenure is not its own (the token differs) and stand by.
func TestATakeLostInAFailoverDoesNotMakeTwoOwners(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	db, cfg := setup(t)
	ctx := context.Background()
	cfg.Instance = "first"
	first, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	defer first.Release(ctx) //nolint:errcheck // cleanup
	cfg.Instance = "second"
	second, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	defer second.Release(ctx) //nolint:errcheck // cleanup

	ok, err := first.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), first.Lease.Epoch())
	require.NoError(t, first.Lock.Unlock(ctx))
	// The promoted standby never saw the take.
	db.Exec(t, `UPDATE inorder.cursor SET owner_epoch = 0, owner_token = 0, owner_instance = NULL, owner_session = false,
		lease_expires_at = NULL WHERE process_name = 'orders'`)
	require.NoError(t, first.Reconnect(ctx)) // its session and advisory lock went with the old primary
	ok, err = second.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the lease ran out: the second takes the process")
	require.Equal(t, int64(1), second.Lease.Epoch(), "under the epoch the first had")
	require.NoError(t, second.Position.SetPosition(ctx, inordertype.Position{CreatedAt: time.Now(), ID: "2"}, 1))
	require.NoError(t, second.Lock.Unlock(ctx))

	ok, err = first.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the first does not own the process")
	require.False(t, first.Lease.Owner())
	require.Equal(t, "second", first.Lease.Holder())
	var owner string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT owner_instance FROM inorder.cursor WHERE process_name = 'orders'").Scan(&owner))
	require.Equal(t, "second", owner)
}

// TestEachStoreOwnsItsRepositories: two stores (two Clients, or processors without one) open repositories
// of their own, with nothing shared behind them; within a store one claim per repository. Two stores'
// processors of one process are two instances, and only one of them owns it.
func TestEachStoreOwnsItsRepositories(t *testing.T) {
	t.Parallel()
	_, cfg := setup(t)
	ctx := context.Background()
	one, two := store.New(nil), store.New(nil)
	cfg.Instance = "one"
	a, err := one.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	cfg.Instance = "two"
	b, err := two.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.NotSame(t, a, b, "each store owns its repositories")
	cfg.Instance = "one"
	again, err := one.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	require.Same(t, a, again, "asking a store twice gives the same repository")

	require.NoError(t, a.Claim())
	require.ErrorIs(t, again.Claim(), store.ErrInUse, "one repository, one user")
	require.NoError(t, b.Claim())
	ok, err := a.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, a.Lock.Unlock(ctx))
	ok, err = b.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the other store's instance stands by while the first owns the process")
	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))
}

// TestAStoreProbesOncePerDatabase gives the processors of one store one probe, and those of another store
// their own.
func TestAStoreProbesOncePerDatabase(t *testing.T) {
	t.Parallel()
	_, cfg := setup(t)
	shared := func() *store.Shared {
		s, err := store.NewShared(store.SharedConfig{ConnConfig: cfg.ConnConfig, MaxConns: 2})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
	one, two := store.New(shared()), store.New(shared())
	p, q := one.Prober(), one.Prober()
	require.Same(t, p, q, "one probe per database in a store")
	r := two.Prober()
	require.NotSame(t, p, r, "another store probes for its own processors")
	p.Close()
	q.Close()
	next := one.Prober()
	require.NotSame(t, p, next, "the last Close ends the probe; the next user starts another")
	next.Close()
	r.Close()
}
