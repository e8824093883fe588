package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// TestTheProbeRenewsALeaseOnlyAsTheOwnerLastSawIt: a quiet owner's lease is renewed by the probe, in the
// statement that probes for it, and the owner learns the row's new version; a renewal under another
// token, from a version the row no longer has, or of a row held locked, renews nothing.
func TestTheProbeRenewsALeaseOnlyAsTheOwnerLastSawIt(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	cfg.Lease = 30 * time.Second
	ctx := context.Background()
	cursors := store.New(sharedFor(t, cfg))
	repo, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = repo.Release(ctx) })
	ok, err := repo.Lock.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, repo.Lock.Unlock(ctx))
	prober := cursors.Prober()
	t.Cleanup(prober.Close)

	expires := func() (left time.Duration, version string) {
		var ms int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::bigint,
			xmin::text FROM inorder.cursor WHERE process_name = 'orders'`).Scan(&ms, &version))
		return time.Duration(ms) * time.Millisecond, version
	}
	// Cut the lease short, as time would, so that a renewal shows.
	db.Exec(t, "UPDATE inorder.cursor SET lease_expires_at = clock_timestamp() + interval '10 seconds' WHERE process_name = 'orders'")
	// Who writes the row: every write is named for its process, whichever connection makes it.
	db.Exec(t, `CREATE TABLE writes (app text);
		CREATE FUNCTION note_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO writes VALUES (current_setting('application_name')); RETURN NEW; END $$;
		CREATE TRIGGER note_write BEFORE UPDATE ON inorder.cursor FOR EACH ROW EXECUTE FUNCTION note_write();`)
	_, version := expires()
	wait := func(token int64, version string) store.ProbeResult {
		rn := repo.Lease.ProbeRenewal()
		require.NotNil(t, rn, "a quiet owner's lease is the probe's to renew")
		rn.Token, rn.Due = token, time.Now()
		return prober.Wait(ctx, store.ProbeRequest{Cursor: "orders", Version: version, Gap: time.Millisecond,
			MaxGap: 5 * time.Millisecond, Renew: rn}, 300*time.Millisecond, nil)
	}

	// Another tenure's token: nothing renewed, and the row unchanged.
	r := wait(repo.Lease.Tenure()+1, version)
	require.NoError(t, r.Err)
	require.Nil(t, r.Renewed)
	left, now := expires()
	require.Less(t, left, 11*time.Second)
	require.Equal(t, version, now)

	// A version the row no longer has (an operator's action the owner has not seen): nothing renewed,
	// and the probe says that the row changed.
	r = wait(repo.Lease.Tenure(), "1")
	require.NoError(t, r.Err)
	require.Nil(t, r.Renewed)
	require.True(t, r.Changed)
	left, _ = expires()
	require.Less(t, left, 11*time.Second)

	// The row locked by someone else: passed over, not waited for.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM inorder.cursor WHERE process_name = 'orders' FOR UPDATE")
	require.NoError(t, err)
	r = wait(repo.Lease.Tenure(), version)
	require.NoError(t, r.Err)
	require.Nil(t, r.Renewed)
	// A probe made for that wait may still be on its way when the wait ends: one answered after it (the
	// prober probes one batch at a time) ran while the row was still locked, so no renewal of that wait's
	// lands after the lock is gone, behind the next case's back.
	after := prober.Wait(ctx, store.ProbeRequest{Cursor: "orders", Version: "1", Gap: time.Millisecond,
		MaxGap: 5 * time.Millisecond}, 5*time.Second, nil)
	require.True(t, after.Changed, "a probe answered after the locked case's wait")
	require.NoError(t, tx.Rollback(ctx))

	// The owner's tenure at the version it saw: renewed, and the owner told the row's new version, at
	// which the probe no longer says that the row changed.
	sent := time.Now()
	r = wait(repo.Lease.Tenure(), version)
	require.NoError(t, r.Err)
	require.NotNil(t, r.Renewed)
	require.False(t, r.Changed)
	left, now = expires()
	require.Greater(t, left, 25*time.Second, "the lease runs a whole lease from the renewal")
	require.Equal(t, now, r.Renewed.Version)
	require.False(t, r.Renewed.Sent.Before(sent))
	var seen time.Duration
	var ms int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM seen_until - clock_timestamp()) * 1000)::bigint
		FROM inorder.instance WHERE process_name = 'orders'`).Scan(&ms))
	seen = time.Duration(ms) * time.Millisecond
	require.Greater(t, seen, 25*time.Second, "the instance said it is there with the renewal")
	var apps []string
	rows, err := db.Pool.Query(ctx, "SELECT app FROM writes")
	require.NoError(t, err)
	for rows.Next() {
		var app string
		require.NoError(t, rows.Scan(&app))
		apps = append(apps, app)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{repo.ApplicationName()}, apps, "the renewal, named for its process, is the one write")
	repo.Lock.Renewed(r.Renewed, repo.Lease.Tenure())
	require.Equal(t, now, repo.Position.Version())
	require.Greater(t, repo.Lease.LeaseLeft(), 25*time.Second)
}

// TestOneProbeAnswersAThousandWaiters: the processors of a store wait on one probe whatever their number,
// beyond the columns a statement may return (1,664).
func TestOneProbeAnswersAThousandWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prober := proberFor(t)
	const n = 1000
	errs := make(chan error, n)
	for i := range n {
		go func() {
			// No such cursor row: its version reads as empty, as asked, so nothing wakes the waiter but
			// an error.
			r := prober.Wait(ctx, store.ProbeRequest{Cursor: fmt.Sprintf("p%d", i), Gap: 50 * time.Millisecond,
				MaxGap: 50 * time.Millisecond}, 2*time.Second, nil)
			errs <- r.Err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
}

// proberFor returns the probe of a store over a database of its own, closed when the test ends.
func proberFor(t *testing.T) *store.Prober {
	t.Helper()
	_, cfg := setup(t)
	prober := store.New(sharedFor(t, cfg)).Prober()
	t.Cleanup(prober.Close)
	return prober
}

// sharedFor makes connections shared as a Client's are over cfg's database, for a store whose probe the
// test runs: a probe borrows from its store's pool.
func sharedFor(t *testing.T, cfg store.Config) *store.Shared {
	t.Helper()
	s, err := store.NewShared(store.SharedConfig{ConnConfig: cfg.ConnConfig, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// checkpointReads counts, as pgx's tracer, the statements that read a process's checkpoint as it stands
// (the newest of its row and its entries), which a lock needs only when something but its owner wrote.
type checkpointReads struct{ n atomic.Int64 }

func (c *checkpointReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM inorder.position WHERE process_name") {
		c.n.Add(1)
	}
	return ctx
}

func (c *checkpointReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAnOwnerKnowsItsPositionAfterTheProbeRenewedItsLease: the probe's renewal folds the owner's newest
// checkpoint entry into the cursor row, which changes the row's position_seq; told of the renewal, the
// owner knows that the fold was of its own entry, and its next lock goes on from the position it knows
// without reading the checkpoint log again.
func TestAnOwnerKnowsItsPositionAfterTheProbeRenewedItsLease(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	reads := &checkpointReads{}
	cfg.ConnConfig.Tracer = reads
	cfg.Lease = 30 * time.Second
	ctx := context.Background()
	cursors := store.New(sharedFor(t, cfg))
	repo, err := cursors.Open(ctx, "orders", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = repo.Release(ctx) })
	lock := func() {
		t.Helper()
		ok, err := repo.Lock.TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	lock()
	pos := inordertype.Position{CreatedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), ID: "7"}
	ok, err := repo.Lock.Checkpoint(ctx, pos, 1, store.InFlight{})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, repo.Lock.Unlock(ctx))
	seq := func() (n int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT position_seq FROM inorder.cursor WHERE process_name = 'orders'").Scan(&n))
		return n
	}
	before := seq()

	prober := cursors.Prober()
	t.Cleanup(prober.Close)
	rn := repo.Lease.ProbeRenewal()
	require.NotNil(t, rn)
	rn.Due = time.Now()
	r := prober.Wait(ctx, store.ProbeRequest{Cursor: "orders", Version: repo.Position.Version(), Gap: time.Millisecond,
		MaxGap: 5 * time.Millisecond, Renew: rn}, 5*time.Second, nil)
	require.NoError(t, r.Err)
	require.NotNil(t, r.Renewed, "the quiet owner's lease renewed by the probe")
	require.NotEqual(t, before, seq(), "the renewal folded the owner's entry into the row")
	require.Equal(t, seq(), r.Renewed.RowSeq)
	repo.Lock.Renewed(r.Renewed, repo.Lease.Tenure())

	read := reads.n.Load()
	lock()
	require.Equal(t, read, reads.n.Load(), "the lock after the renewal reads no checkpoint")
	require.Equal(t, pos, repo.Position.State().Position)
	require.NoError(t, repo.Lock.Unlock(ctx))

	// Someone else's write of the row (an operator's rewind) is read as always.
	db.Exec(t, "UPDATE inorder.cursor SET position_created_at = position_created_at - interval '1 hour' WHERE process_name = 'orders'")
	lock()
	require.Greater(t, reads.n.Load(), read, "a row another wrote is read again")
	require.Equal(t, pos.CreatedAt.Add(-time.Hour), repo.Position.State().Position.CreatedAt)
	require.NoError(t, repo.Lock.Unlock(ctx))
}

// TestTheProbeAsksEachQuestionOverItsWaitersValues: waiters asking the same condition of different values
// are asked it together, each answered for its own values; waiters of another condition, and waiters that
// watch no rows, beside them in the same probe, are answered for theirs.
func TestTheProbeAsksEachQuestionOverItsWaitersValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prober := proberFor(t)
	type asked struct {
		q    *store.RowsQuestion
		want bool
	}
	var all []asked
	for i := range 300 {
		switch i % 3 {
		case 0:
			all = append(all, asked{&store.RowsQuestion{Cond: "w.v1 > w.v2", Types: []string{"int8", "int8"},
				Values: []any{int64(i), int64(150)}}, i > 150})
		case 1:
			all = append(all, asked{&store.RowsQuestion{Cond: "w.v1 LIKE '%7%'", Types: []string{"text"},
				Values: []any{fmt.Sprint(i)}}, strings.Contains(fmt.Sprint(i), "7")})
		default:
			all = append(all, asked{nil, false})
		}
	}
	type answer struct {
		i    int
		rows bool
		err  error
	}
	answers := make(chan answer, len(all))
	for i, a := range all {
		go func() {
			req := store.ProbeRequest{Cursor: fmt.Sprintf("p%d", i), Gap: 20 * time.Millisecond, MaxGap: 20 * time.Millisecond}
			if a.q != nil {
				q := *a.q
				req.RowsFunc = func() store.RowsQuestion { return q }
			}
			r := prober.Wait(ctx, req, time.Second, nil)
			answers <- answer{i, r.Rows, r.Err}
		}()
	}
	for range all {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, all[a.i].want, a.rows, "waiter %d", a.i)
	}
}

// TestRowsForAQuietWaiterMakeTheNextProbeAskEveryone: a waiter whose gap has grown to its longest is
// answered that rows are there; the next probe then asks every waiter at once rather than each at its own
// gap, so that a row that wakes one of a quiet fleet wakes the others with it.
func TestRowsForAQuietWaiterMakeTheNextProbeAskEveryone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prober := proberFor(t)
	yes := func() store.RowsQuestion { return store.RowsQuestion{Cond: "true"} }
	// The late waiter's first probe is a minute away: only the rush asks for it within its wait.
	late := make(chan store.ProbeResult, 1)
	go func() {
		late <- prober.Wait(ctx, store.ProbeRequest{Cursor: "late", RowsFunc: yes, Gap: time.Minute, MaxGap: time.Minute},
			30*time.Second, nil)
	}()
	// The quiet waiter asks again until the late one is answered (it may not have begun its wait when the
	// first answer came).
	var r store.ProbeResult
	require.Eventually(t, func() bool {
		quiet := prober.Wait(ctx, store.ProbeRequest{Cursor: "quiet", RowsFunc: yes, Gap: 5 * time.Millisecond,
			MaxGap: 5 * time.Millisecond}, 5*time.Second, nil)
		require.NoError(t, quiet.Err)
		require.True(t, quiet.Rows)
		select {
		case r = <-late:
			return true
		default:
			return false
		}
	}, 20*time.Second, time.Millisecond, "the late waiter answered")
	require.NoError(t, r.Err)
	require.True(t, r.Rows, "the late waiter asked at once after the quiet one's rows")
}
