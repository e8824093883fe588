package migrations_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// pending is a migration that the binary does not have, which alters inorder.cursor as a real one may:
// ALTER TABLE needs the table's ACCESS EXCLUSIVE lock.
func pending() []migrations.Migration {
	return append(migrations.All(), migrations.Migration{Version: 1000, Name: "lock_test",
		SQL: "ALTER TABLE inorder.cursor ADD COLUMN lock_test integer"})
}

// holdAccessShare opens a transaction that holds ACCESS SHARE on inorder.cursor, as a pg_dump does on every
// table for its whole length, in a session named pg_dump; the function returned ends it.
func holdAccessShare(t *testing.T, db *pgtest.DB) func() {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "pg_dump"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "BEGIN; LOCK TABLE inorder.cursor IN ACCESS SHARE MODE")
	require.NoError(t, err)
	return func() {
		_, err := conn.Exec(ctx, "COMMIT")
		require.NoError(t, err)
	}
}

// dump is how LockWait names the lock holdAccessShare holds.
var dump = regexp.MustCompile(`^pid \d+ \(pg_dump, in a transaction for \d+s\): AccessShareLock on inorder\.cursor$`)

// TestMigrateNeverMakesRunningProcessorsQueueBehindIt: while a pg_dump holds ACCESS SHARE on inorder.cursor,
// a migration's ALTER TABLE waits, and every statement of running processors on the table would queue
// behind it for the dump's whole length. Migrate gives up each wait at its lock timeout and tries again
// after a pause, so a processor that delivers all along never stalls much longer than the lock timeout,
// and the migration is applied once the dump ends.
func TestMigrateNeverMakesRunningProcessorsQueueBehindIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON events (created_at, id)`)
	pgtest.AddClock(t, db, "events")
	type event struct {
		ID int64 `db:"id"`
	}
	var mu sync.Mutex
	var delivered []time.Time
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	p, err := processor.New(processor.Config[event]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "lock_test",
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "events"},
		Handler: handlers.HandlerFunc[event](func(context.Context, *handlers.Record[event]) error {
			mu.Lock()
			delivered = append(delivered, time.Now())
			mu.Unlock()
			return nil
		}),
		PollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	processortest.Start(t, p, nil)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered)
	}
	// A row every 10ms, so that the processor has something to deliver all along.
	stop := make(chan struct{})
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = db.Pool.Exec(ctx, "INSERT INTO events DEFAULT VALUES")
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-writing })
	require.Eventually(t, func() bool { return count() >= 20 }, 30*time.Second, 10*time.Millisecond)

	release := holdAccessShare(t, db)
	const lockTimeout = time.Second
	held := time.Now()
	var waits []migrations.LockWait
	var applied migrations.Applied
	var migrateErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		applied, migrateErr = migrations.MigrateThese(ctx, db.Pool, pending(), migrations.Options{
			LockTimeout: lockTimeout,
			Waited: func(w migrations.LockWait) {
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			},
		})
	}()
	waited := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(waits)
	}
	require.Eventually(t, func() bool { return waited() >= 2 }, 30*time.Second, 10*time.Millisecond,
		"migrate gave up waiting for the lock twice")
	release()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("migrate did not finish within 30s of the lock's release")
	}
	require.NoError(t, migrateErr)
	require.Equal(t, []int{1000}, applied.Versions)
	mu.Lock()
	first := waits[0]
	var longest time.Duration
	last := held
	for _, at := range delivered {
		if at.After(held) {
			longest = max(longest, at.Sub(last))
			last = at
		}
	}
	mu.Unlock()
	t.Logf("migrate gave up %d times (%s), then applied the migration %s after the lock was taken; the "+
		"processor's longest pause in deliveries meanwhile: %s", waited(), first,
		time.Since(held).Round(time.Millisecond), longest.Round(time.Millisecond))
	// The processor queued behind the ALTER TABLE (it would have for as long as the dump ran), but only
	// for about the lock timeout at a time.
	require.Greater(t, longest, lockTimeout/2, "the processor never waited for the migration: the test tests nothing")
	require.Less(t, longest, lockTimeout+time.Second, "the processor stalled behind the migration")
	require.Equal(t, "1000_lock_test", first.Migration)
	require.Equal(t, lockTimeout, first.Waited)
	require.True(t, slices.ContainsFunc(first.Holders, func(h string) bool {
		return dump.MatchString(h)
	}), "the pg_dump is named among what held the lock: %q", first.Holders)
	var column int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'inorder' AND table_name = 'cursor' AND column_name = 'lock_test'`).Scan(&column))
	require.Equal(t, 1, column)
	require.Eventually(t, func() bool { return time.Since(lastOf(&mu, &delivered)) < time.Second },
		30*time.Second, 10*time.Millisecond, "the processor delivers after the migration")
}

// lastOf returns the last time in *ts, under mu.
func lastOf(mu *sync.Mutex, ts *[]time.Time) time.Time {
	mu.Lock()
	defer mu.Unlock()
	return (*ts)[len(*ts)-1]
}

// TestMigrateGivesUpNamingTheLock: a migration that cannot get its lock before the context ends fails
// naming the lock it waited for and who holds it; and the lock timeout Migrate sets does not outlast it in
// a caller's transaction.
func TestMigrateGivesUpNamingTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	release := holdAccessShare(t, db)
	defer release()
	timeout, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := migrations.MigrateThese(timeout, db.Pool, pending(), migrations.Options{LockTimeout: 500 * time.Millisecond})
	require.Error(t, err)
	t.Log(err)
	msg := err.Error()
	require.Regexp(t, `^migrate: gave up after \d+ attempts to get a lock, the last applying 1000_lock_test, `+
		`waited 500ms for a lock on inorder's tables \(held: pid \d+ \(pg_dump, in a transaction for \d+s\): `+
		`AccessShareLock on inorder\.cursor\): context deadline exceeded$`, msg)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, strings.Count(msg, "\n")+1, "one line")

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	_, err = tx.Exec(ctx, "SET LOCAL lock_timeout = '7s'")
	require.NoError(t, err)
	_, err = migrations.Migrate(ctx, tx)
	require.NoError(t, err)
	var setting string
	require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&setting))
	require.Equal(t, "7s", setting, "Migrate left its lock_timeout in the caller's transaction")
}
