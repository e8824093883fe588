package processor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgbouncer"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/pooler"
	"github.com/inorder-dev/inorder/processor"
)

// cursorWritesDDL logs every committed write of a cursor row with the owner it was made under, in commit
// order, so that a test can check from the database that two instances never owned a process at once.
const cursorWritesDDL = `
	CREATE TABLE cursor_writes (
		n        bigserial PRIMARY KEY,
		process  text NOT NULL,
		epoch    bigint NOT NULL,
		owner    text,
		position text
	);
	CREATE FUNCTION log_cursor_write() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO cursor_writes (process, epoch, owner, position)
		VALUES (NEW.process_name, NEW.owner_epoch, NEW.owner_instance, NEW.position_id);
		RETURN NULL;
	END
	$$;
	CREATE TRIGGER log_cursor_write AFTER UPDATE ON inorder.cursor FOR EACH ROW EXECUTE FUNCTION log_cursor_write();`

// TestTwoInstancesThroughPgBouncer runs two instances of one process through a real PgBouncer with its
// default configuration (no ignore_startup_parameters), in transaction and in session pooling, with the two
// URL settings that work without prepared statements, while rows are written through the same pooler.
// One instance owns the process until it stops cleanly; then the other takes over. Every row arrives once,
// in order; the database's log of cursor writes shows one owner at a time; the standby delivers nothing
// while the owner runs; and no instance mistakes the other for an operator.
func TestTwoInstancesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session} {
		for _, exec := range []string{"exec", "simple_protocol"} {
			t.Run(string(mode)+"/"+exec, func(t *testing.T) {
				t.Parallel()
				twoInstancesThroughPgBouncer(t, mode, exec)
			})
		}
	}
}

func twoInstancesThroughPgBouncer(t *testing.T, mode pgbouncer.Mode, exec string) {
	b := setup(t)
	b.db.Exec(t, cursorWritesDDL)
	bouncer := pgtest.Bouncer(t, b.db, mode, nil)
	url := bouncer.URL(b.db.Name, "default_query_exec_mode="+exec)
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	ctx := context.Background()

	cfgFor := func(instance string, h *collector, logs *logBuffer) processor.Config[event] {
		cfg := b.cfg
		cfg.ClientConfig.ConnConfig, cfg.ClientConfig.Instance, cfg.Handler = cc, instance, h
		cfg.Lease = time.Second // renewed several times while the test runs
		cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
		return cfg
	}
	h1, h2 := newCollector(), newCollector()
	logs1, logs2 := &logBuffer{}, &logBuffer{}
	stop1 := start(t, cfgFor("first", h1, logs1))
	waitFor(t, "the first instance to own the process", func() bool { return owner(t, b) == "first" })
	start(t, cfgFor("second", h2, logs2))

	// Rows written through the pooler too, so that the application's transactions and inorder's share
	// server connections.
	writer, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer writer.Close(ctx)
	var ids []int64
	write := func(n int) {
		for range n {
			var id int64
			require.NoError(t, writer.QueryRow(ctx,
				"INSERT INTO events (aggregate_id, seq) VALUES ('a', $1) RETURNING id", len(ids)+1).Scan(&id))
			ids = append(ids, id)
		}
	}
	for range 10 {
		write(10)
		waitFor(t, "the first instance to deliver", func() bool { return h1.count() == len(ids) })
	}
	// Longer than the lease: the owner must keep it while idle, and the standby must not take it.
	var renewedAt time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT lease_expires_at FROM inorder.cursor WHERE process_name = $1",
		b.cfg.Process).Scan(&renewedAt))
	waitFor(t, "the lease to be renewed twice", func() bool {
		var at time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT lease_expires_at FROM inorder.cursor WHERE process_name = $1",
			b.cfg.Process).Scan(&at))
		return at.Sub(renewedAt) > time.Second
	})
	write(20)
	waitFor(t, "the first instance to deliver", func() bool { return h1.count() == len(ids) })
	require.Zero(t, h2.count(), "the standby delivered while the owner ran")
	require.Equal(t, "first", owner(t, b))

	require.NoError(t, stop1())
	write(50)
	waitFor(t, "the second instance to take over and deliver", func() bool { return h1.count()+h2.count() == len(ids) })
	require.Equal(t, ids, append(h1.ids(), h2.ids()...), "every row once, in order, across the two")

	// From the database: epochs only grow, each epoch is one owner's, and there were exactly two.
	rows, err := b.db.Pool.Query(ctx, "SELECT epoch, coalesce(owner, '') FROM cursor_writes WHERE process = $1 ORDER BY n", b.cfg.Process)
	require.NoError(t, err)
	type cursorWrite struct {
		Epoch int64
		Owner string
	}
	writes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cursorWrite])
	require.NoError(t, err)
	owners := map[int64]string{}
	var last int64
	for _, w := range writes {
		require.GreaterOrEqual(t, w.Epoch, last, "the epoch went back: %v", writes)
		last = w.Epoch
		if w.Epoch == 0 {
			continue // written before anyone owned the process
		}
		if o, ok := owners[w.Epoch]; ok {
			require.Equal(t, o, w.Owner, "two owners wrote under epoch %d", w.Epoch)
		}
		owners[w.Epoch] = w.Owner
	}
	require.Len(t, owners, 2, "one tenure each: %v", owners)

	for _, l := range []*logBuffer{logs1, logs2} {
		require.Zero(t, l.count("moved by an operator"), "no operator acted")
	}
	require.Equal(t, 1, logs1.count(`"pool_mode":"`+string(mode)+`"`), "the processor tells once how the pooler pools")
}

// owner returns the instance whose lease runs on the test process's cursor row.
func owner(t *testing.T, b *bundle) string {
	t.Helper()
	var o string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		SELECT coalesce(max(owner_instance), '') FROM inorder.cursor
		WHERE process_name = $1 AND lease_expires_at > clock_timestamp()`, b.cfg.Process).Scan(&o))
	return o
}

// TestTransactionTimeHorizonThroughATransactionPooler checks what the transactions horizon leaves out
// through a pooler in transaction mode, where PgBouncer hands a server connection to the next client with
// the application_name the last one set when that client sets none. An application transaction that gets
// a server connection last used by inorder (so it runs as "inorder:…") begins, and so fixes its now(), then
// waits while later rows are written. The stream must wait for it (status names it as the holder),
// deliver nothing dated after its start meanwhile, and deliver its row in order once it commits.
func TestTransactionTimeHorizonThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.dropClock(t) // the transactions horizon is the opt-in of a table without the clock
	b.cfg.Source.Horizon = inordertype.HorizonTransactions
	ctx := context.Background()
	b.db.Exec(t, "ALTER TABLE events ALTER COLUMN created_at SET DEFAULT now()")
	bouncer := pgtest.Bouncer(t, b.db, pgbouncer.Transaction, nil)
	url := bouncer.URL(b.db.Name, "default_query_exec_mode=exec")
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig = cc
	start(t, cfg)
	first := b.insert(t, 3)
	waitFor(t, "the first rows", func() bool { return b.h.count() == 3 })

	// The application's client sets no application_name. Begin until a transaction runs on a server
	// connection whose last client was inorder's (the cursor, or the probe that runs every few ms).
	app, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer app.Close(ctx)
	var tx pgx.Tx
	var began time.Time
	var pid int32
	waitFor(t, "a transaction on a server connection named by inorder", func() bool {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		tx, err = app.Begin(ctx)
		require.NoError(t, err)
		var name string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('application_name'), now(), pg_backend_pid()").
			Scan(&name, &began, &pid))
		return strings.HasPrefix(name, "inorder:")
	})
	defer tx.Rollback(ctx) //nolint:errcheck

	later := b.insert(t, 3) // dated after the application's transaction began
	waitFor(t, "status to name the application's transaction as the holder", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		return err == nil && len(procs) == 1 && procs[0].Info.HeldByPID == int(pid)
	})
	for _, rec := range b.h.records() {
		require.True(t, rec.CreatedAt.Before(began), "record %d, dated after the open transaction began, was delivered", rec.Value.ID)
	}
	var mine int64
	require.NoError(t, tx.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ('app', 1) RETURNING id").Scan(&mine))
	require.NoError(t, tx.Commit(ctx))
	waitFor(t, "every row", func() bool { return b.h.count() == 7 })
	require.Equal(t, append(append(first, mine), later...), b.h.ids(), "the late row in its place, nothing skipped")
}

// TestAPoolerRefusalSaysWhatToDo: what a pooler refuses, retrying cannot fix. Run returns at once, in one
// line saying what to change, instead of retrying forever.
func TestAPoolerRefusalSaysWhatToDo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bouncer := pgtest.Bouncer(t, b.db, pgbouncer.Transaction, map[string]string{"default_pool_size": "1"})

	run := func(url string) error {
		cc, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		cfg := b.cfg
		cfg.ClientConfig.ConnConfig = cc
		p, err := processor.New(cfg)
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx) }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			cancel()
			<-done
			t.Fatal("Run kept retrying what the pooler refuses")
			return nil
		}
	}

	// pgx's default statement cache: another client prepared the same statement on the one server
	// connection first, so the processor's prepare collides with it (PgBouncer 1.18 keeps no prepared
	// statements per client).
	other, err := pgx.Connect(ctx, bouncer.URL(b.db.Name, ""))
	require.NoError(t, err)
	defer other.Close(ctx)
	var pid int
	require.NoError(t, other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)) // prepared, with a result to scan
	err = run(bouncer.URL(b.db.Name, ""))
	require.ErrorIs(t, err, pooler.ErrPreparedStatements)
	require.Contains(t, err.Error(), "add default_query_exec_mode=exec to the database URL")
	require.NotContains(t, err.Error(), "\n")

	// A start-up parameter in the URL, which PgBouncer refuses unless told to ignore it.
	err = run(bouncer.URL(b.db.Name, "default_query_exec_mode=exec&search_path=public"))
	require.ErrorIs(t, err, pooler.ErrStartupParameter)
	require.Contains(t, err.Error(), "search_path")
	require.Contains(t, err.Error(), "ignore_startup_parameters")

	var rows int
	require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM inorder.cursor").Scan(&rows))
	require.Zero(t, rows, "nothing registered")
}

// TestListenThroughATransactionPoolerGivesWayToTheProbe: LISTEN cannot work through a pooler in
// transaction mode. The processor says so once at start and delivers through the probe.
func TestListenThroughATransactionPoolerGivesWayToTheProbe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createNotifyTrigger(t, b)
	bouncer := pgtest.Bouncer(t, b.db, pgbouncer.Transaction, nil)
	cc, err := pgx.ParseConfig(bouncer.URL(b.db.Name, "default_query_exec_mode=exec"))
	require.NoError(t, err)
	logs := &logBuffer{}
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig, cfg.Listen = cc, true
	cfg.PollInterval = time.Minute // only the probe can find the rows in time
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	start(t, cfg)
	waitFor(t, "the processor to lock its cursor", func() bool { return logs.count("cursor locked") == 1 })
	ids := b.insert(t, 3)
	waitFor(t, "the rows", func() bool { return b.h.count() == 3 })
	require.Equal(t, ids, b.h.ids())
	require.Equal(t, 1, logs.count("--listen needs a session of its own"), "said once")
	require.Zero(t, logs.count("listening for insert notifications"), "no LISTEN through the pooler")
}

// TestPartitionedRefusesATransactionPooler: a partitioned process's instances coordinate through sessions
// of their own, which a pooler in transaction mode does not keep. Run refuses at once, saying so.
func TestPartitionedRefusesATransactionPooler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bouncer := pgtest.Bouncer(t, b.db, pgbouncer.Transaction, nil)
	cc, err := pgx.ParseConfig(bouncer.URL(b.db.Name, "default_query_exec_mode=exec"))
	require.NoError(t, err)
	cfg := b.cfg
	cfg.ClientConfig.ConnConfig = cc
	cfg.Source.KeyColumn = "aggregate_id"
	p, err := processor.NewPartitioned(cfg, processor.PartitionOpts{Partitions: 2})
	require.NoError(t, err)
	err = p.Run(context.Background())
	require.ErrorIs(t, err, processor.ErrTransactionPooler)
	require.Contains(t, err.Error(), "give it a direct or session-pooled database URL")
}
