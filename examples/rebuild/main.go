// Command rebuild rebuilds an event-sourced read model without stopping the one that serves.
//
// The application reads account balances through the view balances, which points at one version of the
// read model, balances_v<N>, kept up to date by the process balances_v<N>. To change how balances are
// projected (a new column, a fixed bug), deploy the new version beside the old one:
//
//	DATABASE_URL=... go run ./examples/rebuild -version 1   # serving
//	DATABASE_URL=... go run ./examples/rebuild -version 2   # rebuilding beside it
//
// Version 2 registers its own process from the beginning of account_events and projects into its own
// table, a batch at a time (handlers.TxBatchHandler: one upsert per batch, committed with the position),
// while version 1 keeps serving. Once version 2 runs healthy within a handful of events of the end, it
// points the view at balances_v2 in one statement (only if the view still reads version 1): every read
// of the application sees one version, consistent with its position, and at the switch the balances may
// step back by the few events version 2 had yet to project. Then stop version 1; version 2 forgets process
// balances_v1 (which refuses while an instance of it runs) and says that balances_v1 may be dropped. A
// version older than the one the view reads refuses to start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

func main() {
	version := flag.Int("version", 1, "the read model version this instance projects (and serves once caught up)")
	flag.Parse()
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "rebuild: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, databaseURL, *version, log); err != nil {
		log.Fatal().Err(err).Msg("rebuild")
	}
}

// table and process name version v of the read model: its table and the process that keeps it.
func table(v int) string   { return fmt.Sprintf("balances_v%d", v) }
func process(v int) string { return fmt.Sprintf("balances_v%d", v) }

const events = `
	CREATE TABLE IF NOT EXISTS account_events (
		id         bigserial PRIMARY KEY,
		account_id text NOT NULL,
		amount     bigint NOT NULL, -- negative for a withdrawal
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX IF NOT EXISTS account_events_created_at_id_idx ON account_events (created_at, id);`

// setup applies inorder's migrations and creates the events, with inorder's insert clock, version v's table
// and, on the first run, the view the application reads, pointing at it.
func setup(ctx context.Context, pool *pgxpool.Pool, v int) error {
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return err
	}
	ident := pgx.Identifier{table(v)}.Sanitize()
	_, err := pool.Exec(ctx, events+`
		CREATE TABLE IF NOT EXISTS `+ident+` (account_id text PRIMARY KEY, balance bigint NOT NULL, events bigint NOT NULL);
		DO $$ BEGIN
			IF to_regclass('balances') IS NULL THEN
				EXECUTE 'CREATE VIEW balances AS SELECT account_id, balance, events FROM `+ident+`';
			END IF;
		END $$`)
	if err != nil {
		return err
	}
	// The insert clock, which orders the events for the processor: what `inorder migrate --table
	// account_events` adds, online, and keeps as it is when run again.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := migrations.AddClock(ctx, conn.Conn(), "account_events", migrations.ClockOpts{}); err != nil {
		return fmt.Errorf("add the insert clock to account_events: %w", err)
	}
	return nil
}

// projection is version v's projection: it upserts the balances of a whole batch with one statement.
type projection struct{ table string }

type accountEvent struct {
	AccountID string `db:"account_id"`
	Amount    int64  `db:"amount"`
}

// HandleTxBatch applies the events of a batch, in order, inside the transaction that moves the position.
func (p projection) HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[accountEvent]) error {
	accounts := make([]string, len(recs))
	amounts := make([]int64, len(recs))
	for i, r := range recs {
		accounts[i], amounts[i] = r.Value.AccountID, r.Value.Amount
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO `+pgx.Identifier{p.table}.Sanitize()+` AS b (account_id, balance, events)
		SELECT account_id, sum(amount), count(*) FROM unnest($1::text[], $2::bigint[]) AS e(account_id, amount)
		GROUP BY account_id
		ON CONFLICT (account_id) DO UPDATE SET balance = b.balance + excluded.balance, events = b.events + excluded.events`,
		accounts, amounts)
	return err
}

// HandleTx applies one event: the processor's way to find the one that fails when a batch fails.
func (p projection) HandleTx(ctx context.Context, tx pgx.Tx, rec *handlers.Record[accountEvent]) error {
	return p.HandleTxBatch(ctx, tx, []*handlers.Record[accountEvent]{rec})
}

// run projects version v until ctx is done. A version above 1 takes over from the one before it once it
// has caught up: it points the view at its table and, once that version's instances have stopped,
// forgets its process. Options adjust the processor's configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, v int, log zerolog.Logger, options ...func(*processor.Config[accountEvent])) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if err := setup(ctx, pool, v); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	cfg := processor.Config[accountEvent]{
		StartFrom:    inordertype.StartFromBeginning, // a new version projects every event
		Process:      process(v),
		ClientConfig: processor.ClientConfig{ConnConfig: pool.Config().ConnConfig},
		Source:       inordertype.Source{Table: "account_events", Columns: []string{"account_id", "amount"}},
		TxHandler:    projection{table: table(v)},
		BatchSize:    1000,
		Logger:       log,
	}
	for _, option := range options {
		option(&cfg)
	}
	if newer, err := serving(ctx, pool); err != nil {
		return err
	} else if newer > v {
		return fmt.Errorf("version %d serves the application: version %d is retired", newer, v)
	}
	p, err := processor.New(cfg)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	if v == 1 {
		return <-ran
	}
	took := make(chan error, 1)
	go func() { took <- takeOver(runCtx, pool, v, log) }()
	select {
	case err := <-ran: // the projection stopped (or failed) before it took over: so does the take-over
		stop()
		<-took
		return err
	case err := <-took:
		if err != nil && runCtx.Err() == nil {
			stop()
			<-ran
			return err
		}
		return <-ran
	}
}

// serving returns the version the view balances points at.
func serving(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int, error) {
	var def string
	if err := q.QueryRow(ctx, "SELECT pg_get_viewdef('balances')").Scan(&def); err != nil {
		return 0, fmt.Errorf("read the view balances: %w", err)
	}
	// "... FROM balances_v2;": the version is the number after the last "balances_v".
	i := strings.LastIndex(def, "balances_v")
	if i < 0 {
		return 0, fmt.Errorf("the view balances reads no version: %s", def)
	}
	rest := def[i+len("balances_v"):]
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	return strconv.Atoi(rest[:end])
}

// switchView points the view at version v's table, in one transaction that holds a lock every switch
// takes, and only if it points at the version before: a version restarted after its successor took over
// must not take the view back.
func switchView(ctx context.Context, pool *pgxpool.Pool, v int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('balances view'))"); err != nil {
		return err
	}
	now, err := serving(ctx, tx)
	if err != nil {
		return err
	}
	switch {
	case now == v:
		return nil
	case now != v-1:
		return fmt.Errorf("the view reads version %d, not %d: version %d does not take it over", now, v-1, v)
	}
	if _, err := tx.Exec(ctx, `CREATE OR REPLACE VIEW balances AS SELECT account_id, balance, events FROM `+
		pgx.Identifier{table(v)}.Sanitize()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// takeOver waits until version v has caught up with the events (see caughtUp), points the view at its table, then waits
// for the previous version's instances to stop and forgets its process.
func takeOver(ctx context.Context, pool *pgxpool.Pool, v int, log zerolog.Logger) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		caught, err := caughtUp(ctx, pool, process(v))
		if err != nil {
			return err
		}
		if caught {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	// One statement: a reader sees the old version or the new one, each consistent with a position.
	if err := switchView(ctx, pool, v); err != nil {
		return fmt.Errorf("switch the view: %w", err)
	}
	log.Info().Str("table", table(v)).Msg("caught up: the application now reads this version")
	opts := cursor.ActionOpts{Actor: process(v), Reason: fmt.Sprintf("replaced by read model version %d", v)}
	for {
		_, err := cursor.Forget(ctx, pool, process(v-1), opts)
		switch {
		case err == nil:
			log.Info().Str("process", process(v-1)).Str("table", table(v-1)).
				Msg("forgot the previous version's process; its table may be dropped")
			return nil
		case errors.Is(err, cursor.ErrUnknownProcess):
			return nil // forgotten already, or never there
		case !errors.Is(err, cursor.ErrBusy):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C: // its instances still run: stop them, and this goes on
		}
	}
}

// closeEnough is how many events a version may have left to project for it to count as caught up: as
// close as a live stream is, where events keep coming, far fewer than a batch.
const closeEnough = 100

// caughtUp reports whether process name runs, without a failing record, and has at most closeEnough
// events left to project.
func caughtUp(ctx context.Context, pool *pgxpool.Pool, name string) (bool, error) {
	procs, err := cursor.Read(ctx, pool, cursor.ReadOpts{Process: name})
	if err != nil || len(procs) == 0 || procs[0].Info.Source.Table == "" {
		return false, err // not registered, or not run yet
	}
	in := &procs[0].Info
	if err := in.Measure(ctx, pool); err != nil {
		return false, err
	}
	healthy := in.Status == cursor.StatusRunning || in.Status == cursor.StatusIdle
	return healthy && in.Lag.Rows <= closeEnough, nil
}
