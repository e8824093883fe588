package processor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// txTimeLoad is the workload of an outbox whose created_at is the transaction's start: each transaction
// locks its aggregate row and inserts 1 to 3 events; 30% first work 0-300 ms after BEGIN; 5% commit up
// to 1.5 s late; 5% roll back. It keeps the exact set of committed and rolled-back rows.
type txTimeLoad struct {
	pool     *pgxpool.Pool
	insert   string // the INSERT, $1 aggregate, $2 seq, RETURNING id
	mu       sync.Mutex
	commits  map[int64]bool
	rollback map[int64]bool
	worked   int
	late     int
}

func (l *txTimeLoad) committed() map[int64]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]bool, len(l.commits))
	for id := range l.commits {
		out[id] = true
	}
	return out
}

func (l *txTimeLoad) run(ctx context.Context, rng *rand.Rand, aggregates int) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	worked := rng.IntN(10) < 3
	if worked { // other work first: the transaction began, and its now() was fixed, long before its insert
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
	agg := rng.IntN(aggregates)
	var seq int
	if err := tx.QueryRow(ctx, "SELECT seq FROM aggregates WHERE id = $1 FOR UPDATE", agg).Scan(&seq); err != nil {
		return err
	}
	n := 1 + rng.IntN(3)
	ids := make([]int64, 0, n)
	for i := 1; i <= n; i++ {
		var id int64
		if err := tx.QueryRow(ctx, l.insert, fmt.Sprint(agg), seq+i).Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if _, err := tx.Exec(ctx, "UPDATE aggregates SET seq = $2 WHERE id = $1", agg, seq+n); err != nil {
		return err
	}
	late := rng.IntN(20) == 0
	if late {
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
	}
	if rng.IntN(20) == 0 {
		l.mu.Lock()
		for _, id := range ids {
			l.rollback[id] = true
		}
		l.mu.Unlock()
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	for _, id := range ids {
		l.commits[id] = true
	}
	if worked {
		l.worked++
	}
	if late {
		l.late++
	}
	l.mu.Unlock()
	return nil
}

// TestNoRowIsSkippedWithTransactionTimeCreatedAt runs the transaction-time workload against a processor
// with the horizon it gets by default (a now() default) or by setting (the application writes now()),
// and against a control processor on the writers horizon over the very same rows. Every committed row
// must reach the processor exactly once, in (created_at, id) order; the control must lose rows, so the
// test is known to be able to fail. One transaction is made to straggle on purpose (it inserts only once
// the control has moved past its start), so that the control loses a row on every run.
func TestNoRowIsSkippedWithTransactionTimeCreatedAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ddl        string
		insert     string
		horizon    inordertype.Horizon // for the processor under test; the control gets the writers horizon
		nowDefault bool
	}{
		{name: "DEFAULT now()", ddl: "ALTER TABLE events ALTER COLUMN created_at SET DEFAULT now()",
			insert:  "INSERT INTO events (aggregate_id, seq) VALUES ($1, $2) RETURNING id",
			horizon: inordertype.HorizonTransactions, nowDefault: true},
		{name: "now() written by the application", ddl: "ALTER TABLE events ALTER COLUMN created_at DROP DEFAULT",
			insert:  "INSERT INTO events (aggregate_id, seq, created_at) VALUES ($1, $2, now()) RETURNING id",
			horizon: inordertype.HorizonTransactions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.dropClock(t) // the opt-in that reads created_at, as a table without the insert clock is read
			const aggregates = 16
			b.db.Exec(t, tc.ddl+`;
				CREATE TABLE aggregates (id int PRIMARY KEY, seq int NOT NULL);
				INSERT INTO aggregates SELECT g, 0 FROM generate_series(0, 15) g`)
			poolCfg, err := pgxpool.ParseConfig(b.db.URL)
			require.NoError(t, err)
			poolCfg.MaxConns = 10
			pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
			require.NoError(t, err)
			defer pool.Close()

			b.cfg.Checkpoint = processor.CheckpointRecord
			b.cfg.BatchSize = 50
			b.cfg.Source.Horizon = tc.horizon
			start(t, b.cfg)

			control := newCollector()
			ccfg := b.cfg
			ccfg.Process, ccfg.Handler = "control", control
			ccfg.Source.Horizon = inordertype.HorizonWriters
			if tc.nowDefault {
				// The writers horizon is refused on a column that defaults to now(), rightly: the control
				// reads a copy of every row, written by a trigger in the row's own transaction at its insert,
				// from a table whose created_at has no default.
				b.db.Exec(t, `CREATE TABLE control_events (LIKE events INCLUDING INDEXES);
					CREATE FUNCTION copy_event() RETURNS trigger LANGUAGE plpgsql AS
						$$ BEGIN INSERT INTO control_events SELECT NEW.*; RETURN NEW; END $$;
					CREATE TRIGGER copy_event AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION copy_event()`)
				ccfg.Source.Table = "control_events"
			}
			start(t, ccfg)

			load := &txTimeLoad{pool: pool, insert: tc.insert, commits: map[int64]bool{}, rollback: map[int64]bool{}}
			ctx := context.Background()
			deadline := time.Now().Add(5 * time.Second)
			var wg sync.WaitGroup
			errs := make(chan error, 9)
			for w := range 8 {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 7))
					for time.Now().Before(deadline) {
						if err := load.run(ctx, rng, aggregates); err != nil {
							errs <- err
							return
						}
					}
				}(uint64(w))
			}
			// The straggler: it begins, waits until the control has delivered a row dated after its start,
			// then inserts and commits. Its row lands behind the control's position.
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx) //nolint:errcheck
					var began time.Time
					if err := tx.QueryRow(ctx, "SELECT now()").Scan(&began); err != nil {
						return err
					}
					for !control.deliveredAfter(began) {
						if time.Now().After(deadline.Add(10 * time.Second)) {
							return fmt.Errorf("the control never delivered a row dated after %s", began)
						}
						time.Sleep(5 * time.Millisecond) // polling the collector, not synchronising with the server
					}
					var id int64
					if err := tx.QueryRow(ctx, tc.insert, "straggler", 1).Scan(&id); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					load.mu.Lock()
					load.commits[id] = true
					load.mu.Unlock()
					return nil
				}()
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			committed := load.committed()
			require.Greater(t, load.worked, 10, "the workload must include transactions that work before inserting")
			require.NotEmpty(t, load.rollback)

			// Every committed row arrives; then an end marker shows that nothing more is on its way.
			waitFor(t, "every committed row", func() bool { return b.h.count() >= len(committed) })
			var endID int64
			require.NoError(t, b.db.Pool.QueryRow(ctx, tc.insert, "end", 1).Scan(&endID))
			waitFor(t, "the end marker", func() bool { ids := b.h.ids(); return len(ids) > 0 && ids[len(ids)-1] == endID })
			waitFor(t, "the control's end marker", func() bool { return control.has(endID) })

			got := b.h.records()
			got = got[:len(got)-1]
			seen := map[int64]bool{}
			for i, rec := range got {
				id := rec.Value.ID
				require.False(t, seen[id], "record %d delivered twice", id)
				seen[id] = true
				require.False(t, load.rollback[id], "rolled-back record %d delivered", id)
				require.True(t, committed[id], "record %d delivered but never committed", id)
				if i > 0 {
					prev := got[i-1]
					require.True(t, prev.CreatedAt.Before(rec.CreatedAt) ||
						(prev.CreatedAt.Equal(rec.CreatedAt) && prev.Value.ID < id),
						"record %d (%s) delivered after %d (%s)", id, rec.CreatedAt, prev.Value.ID, prev.CreatedAt)
				}
			}
			require.Len(t, seen, len(committed), "every committed row delivered exactly once")

			lost := 0
			for id := range committed {
				if !control.has(id) {
					lost++
				}
			}
			t.Logf("%s: %d rows committed (%d transactions worked before inserting, %d committed late, %d rows rolled back); "+
				"transactions horizon delivered %d, skipped 0; writers horizon (control) skipped %d (%.1f%%)",
				tc.name, len(committed), load.worked, load.late, len(load.rollback), len(seen), lost,
				100*float64(lost)/float64(len(committed)))
			require.Greater(t, lost, 0, "the writers horizon should skip rows on this workload")
		})
	}
}

func (c *collector) deliveredAfter(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got) > 0 && c.got[len(c.got)-1].CreatedAt.After(at)
}

func (c *collector) has(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.got {
		if r.Value.ID == id {
			return true
		}
	}
	return false
}

func (c *collector) records() []handlers.Record[event] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]handlers.Record[event](nil), c.got...)
}

// TestAnOpenTransactionElsewholdsATransactionTimeStream opens a transaction that writes nothing to the
// source, in the same database and in another one. For a now() source the first holds the stream,
// visibly, until it ends; the second does not; a clock_timestamp() source is held by neither.
func TestAnOpenTransactionElsewhereHoldsATransactionTimeStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.db.Exec(t, `CREATE TABLE nevents (
			id bigserial PRIMARY KEY, aggregate_id text NOT NULL, seq integer NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON nevents (created_at, id)`)
	clock := newCollector()
	ccfg := b.cfg
	ccfg.Process, ccfg.Handler = "clock", clock
	ncfg := b.cfg
	ncfg.Source.Table, ncfg.Source.Horizon = "nevents", inordertype.HorizonTransactions // the opt-in for now()
	ncfg.HoldWarnAfter = time.Second
	// The processors connect as a role that may only read the sources and inorder's own tables.
	role := restrictedRole(t, b, "events")
	b.db.Exec(t, fmt.Sprintf("GRANT SELECT ON nevents TO %s", pgx.Identifier{role}.Sanitize()))
	ncfg.ClientConfig.ConnConfig = b.cfg.ClientConfig.ConnConfig.Copy()
	ncfg.ClientConfig.ConnConfig.User = role
	start(t, ncfg)
	start(t, ccfg)

	// A transaction in another database holds nothing here.
	other := pgtest.New(t)
	otherTx, err := other.Pool.Begin(ctx)
	require.NoError(t, err)
	defer otherTx.Rollback(ctx) //nolint:errcheck
	_, err = otherTx.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	var first int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO nevents (aggregate_id, seq) VALUES ('a', 1) RETURNING id").Scan(&first))
	waitFor(t, "a row despite the other database's open transaction", func() bool { return b.h.count() == 1 })

	// A report in this database, idle in transaction: it never touches either table.
	report, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer report.Rollback(ctx) //nolint:errcheck
	var reportPID int32
	require.NoError(t, report.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&reportPID))
	var held, clockID int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO nevents (aggregate_id, seq) VALUES ('a', 2) RETURNING id").Scan(&held))
	require.NoError(t, b.db.Pool.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('a', 1) RETURNING id").Scan(&clockID))
	waitFor(t, "the clock_timestamp() stream, not held", func() bool { return clock.has(clockID) })
	waitFor(t, "status to name the report as the holder", func() bool {
		conn, err := b.db.Pool.Acquire(ctx)
		if err != nil {
			return false
		}
		defer conn.Release()
		procs, err := cursor.Read(ctx, conn.Conn(), cursor.ReadOpts{Process: b.cfg.Process})
		return err == nil && len(procs) == 1 && procs[0].Info.HeldByPID == int(reportPID) && !procs[0].Info.HeldSince.IsZero()
	})
	require.Equal(t, []int64{first}, b.h.ids(), "nothing dated after the report's start is delivered while it is open")

	require.NoError(t, report.Rollback(ctx))
	waitFor(t, "the held row once the report ended", func() bool { return b.h.count() == 2 })
	require.Equal(t, []int64{first, held}, b.h.ids())
	waitFor(t, "the hold to clear", func() bool {
		var since *time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT held_since FROM inorder.cursor WHERE process_name = $1", b.cfg.Process).Scan(&since))
		return since == nil
	})
}

// TestAChangedDefaultNeverSkips changes a running source's created_at default from clock_timestamp() to
// now() while a transaction that began before the change is still open, and has it insert only after the
// processor has moved past its start. The processor must switch to the transactions horizon and deliver
// that row, redelivering rather than skipping.
func TestAChangedDefaultNeverSkips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.dropClock(t)
	b.cfg.Source.Horizon = inordertype.HorizonWriters // the opt-in for a created_at only the database sets
	ctx := context.Background()
	start(t, b.cfg)
	before := b.insert(t, 2)
	waitFor(t, "the first rows", func() bool { return b.h.count() == 2 })

	early, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer early.Rollback(ctx) //nolint:errcheck
	var began time.Time
	require.NoError(t, early.QueryRow(ctx, "SELECT now()").Scan(&began))
	after := b.insert(t, 3) // clock_timestamp(): dated after the early transaction began
	waitFor(t, "the rows after the early transaction began", func() bool { return b.h.count() == 5 })
	at, _ := b.position(t, b.cfg.Process)
	require.True(t, at.After(began), "the position has passed the early transaction's start")

	b.db.Exec(t, "ALTER TABLE events ALTER COLUMN created_at SET DEFAULT now()")
	var lateID int64
	require.NoError(t, early.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('early', 1) RETURNING id").Scan(&lateID))
	require.NoError(t, early.Commit(ctx))
	last := b.insert(t, 1)

	waitFor(t, "the early transaction's row", func() bool { return b.h.has(lateID) })
	waitFor(t, "the last row", func() bool { return b.h.has(last[0]) })
	ids := b.h.ids()
	require.Equal(t, append(append([]int64{}, before...), after...), ids[:5])
	// From the switch on, everything from the early transaction's start is delivered again, in order.
	require.Equal(t, append(append([]int64{lateID}, after...), last...), ids[5:])
}
