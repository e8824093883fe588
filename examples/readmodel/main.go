// Command readmodel keeps an event-sourced read model, account balances, up to date exactly once.
//
// Deposits and withdrawals are appended to account_events. A processor reads them in (created_at, id)
// order and hands each to a TxHandler together with the transaction that moves its position, so the
// balance update and the new position commit together or not at all. However the program stops (Ctrl-C, a
// crash, a lost connection), an event is never counted twice and never missed: balances always equal the
// sum of the events up to the position.
//
// Run it against any PostgreSQL database; it creates its tables if they are missing and runs until Ctrl-C:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/readmodel [-checkpoint batch]
//
// then append events and watch the balances follow:
//
//	psql "$DATABASE_URL" -c "INSERT INTO account_events (account_id, type, amount) VALUES ('acc-1', 'deposit', 500)"
//	psql "$DATABASE_URL" -c "SELECT * FROM balances"
//
// With -checkpoint batch the position and the balances commit once per batch instead of once per event:
// faster, and still exactly once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// process names the stream and its cursor row.
const process = "balances_projection"

func main() {
	checkpoint := flag.String("checkpoint", "record", "when the position and the balances commit: record or batch")
	flag.Parse()
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "readmodel: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := setup(ctx, databaseURL); err != nil {
		log.Fatal().Err(err).Msg("setup")
	}
	if err := run(ctx, databaseURL, processor.Checkpoint(*checkpoint), log); err != nil {
		log.Fatal().Err(err).Msg("run")
	}
}

// schema is the event table and the read model built from it.
const schema = `
	CREATE TABLE IF NOT EXISTS account_events (
		id         bigserial PRIMARY KEY,
		account_id text NOT NULL,
		type       text NOT NULL CHECK (type IN ('deposit', 'withdrawal')),
		amount     bigint NOT NULL CHECK (amount > 0),
		created_at timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX IF NOT EXISTS account_events_created_at_id_idx ON account_events (created_at, id);
	CREATE TABLE IF NOT EXISTS balances (
		account_id text PRIMARY KEY,
		balance    bigint NOT NULL,
		events     bigint NOT NULL
	);`

// setup applies inorder's migrations and creates the application's tables, the event table with
// inorder's insert clock.
func setup(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	// The insert clock, which orders the event table for the processor: what `inorder migrate --table
	// account_events` adds, online, and keeps as it is when run again.
	if err := migrations.AddClock(ctx, conn, "account_events", migrations.ClockOpts{}); err != nil {
		return fmt.Errorf("add the insert clock to account_events: %w", err)
	}
	return nil
}

// accountEvent is one row of account_events, as the projection reads it.
type accountEvent struct {
	ID        int64  `db:"id"`
	AccountID string `db:"account_id"`
	Type      string `db:"type"`
	Amount    int64  `db:"amount"`
}

// project applies one event to the balances inside tx, the transaction that also moves the position.
func project(ctx context.Context, tx pgx.Tx, rec *handlers.Record[accountEvent]) error {
	ev := rec.Value
	delta := ev.Amount
	switch ev.Type {
	case "deposit":
	case "withdrawal":
		delta = -delta
	default: // the table's CHECK keeps this from happening; a new type needs new code
		return handlers.Permanent(fmt.Errorf("event %d: unknown type %q", ev.ID, ev.Type))
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO balances (account_id, balance, events) VALUES ($1, $2, 1)
		ON CONFLICT (account_id) DO UPDATE
		SET balance = balances.balance + EXCLUDED.balance, events = balances.events + 1`, ev.AccountID, delta)
	if err != nil {
		return fmt.Errorf("event %d: update balance of %s: %w", ev.ID, ev.AccountID, err)
	}
	return nil
}

// run projects account_events into balances until ctx is done. Options, when given, adjust the
// processor's configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, checkpoint processor.Checkpoint, log zerolog.Logger,
	options ...func(*processor.Config[accountEvent])) error {
	cc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg := processor.Config[accountEvent]{
		StartFrom:    inordertype.StartFromBeginning, // registered anew: from the first row; once registered, its position
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source: inordertype.Source{
			Table:   "account_events",
			Columns: []string{"id", "account_id", "type", "amount"}, // the fields of accountEvent
		},
		TxHandler:  handlers.TxHandlerFunc[accountEvent](project),
		Checkpoint: checkpoint,
		Logger:     log,
	}
	for _, option := range options {
		option(&cfg)
	}
	p, err := processor.New(cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
