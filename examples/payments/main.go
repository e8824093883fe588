// Command payments delivers billing events (bookings and metered usage) to a payment processor's webhook,
// strictly in order and never skipping one, so that every event is charged exactly once.
//
// The application records each billable event as a row of billing_events. The row carries a per-customer
// sequence number, assigned in the same statement that inserts it. A processor reads the table in
// (created_at, id) order and POSTs each row, signed, with webhook.New. It moves past a row only once the
// payment processor answered 2xx.
//
// The payment processor is faked in the same program (see psp.go): an HTTP server on 127.0.0.1 that
// verifies each request's signature with webhook.VerifyRequest, charges each Idempotency-Key once (a
// redelivery is acknowledged but not charged again) and checks that every customer's events arrive in
// sequence. It would answer 409 Conflict to an event that skipped ahead, a permanent failure, but inorder
// never delivers one. It keeps its charges in a schema of its own, fake_psp, so that it remembers them
// across runs as a real one does.
//
// Run it against any PostgreSQL database; it creates its tables if they are missing, records a few events
// for three customers, charges them and keeps running until Ctrl-C:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/payments
//
// Each run records three more events per customer and charges only those: the position is kept in the
// database, so the payment processor sees every customer's sequence go on where it stopped.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// process names the stream and its cursor row.
const process = "billing_webhook"

func main() {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "payments: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := setup(ctx, databaseURL); err != nil {
		log.Fatal().Err(err).Msg("setup")
	}
	if err := recordDemoEvents(ctx, databaseURL); err != nil {
		log.Fatal().Err(err).Msg("record demo events")
	}
	// The secret is shared with the payment processor when the webhook is registered there.
	psp, err := newPaymentProcessor(ctx, databaseURL, []byte("whsec_example_only"), log)
	if err != nil {
		log.Fatal().Err(err).Msg("start the payment processor")
	}
	err = run(ctx, databaseURL, psp, log)
	psp.Close()
	if err != nil {
		log.Fatal().Err(err).Msg("run")
	}
}

// schema is the application's tables. A customers row holds the customer's last sequence number.
const schema = `
	CREATE TABLE IF NOT EXISTS customers (
		id       text PRIMARY KEY,
		last_seq bigint NOT NULL
	);
	CREATE TABLE IF NOT EXISTS billing_events (
		id           bigserial PRIMARY KEY,
		customer_id  text NOT NULL REFERENCES customers,
		seq          bigint NOT NULL,
		kind         text NOT NULL CHECK (kind IN ('booking', 'usage')),
		amount_cents bigint NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
		UNIQUE (customer_id, seq)
	);
	CREATE INDEX IF NOT EXISTS billing_events_created_at_id_idx ON billing_events (created_at, id);`

// setup applies inorder's migrations and creates the application's tables, the billing events with
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
	// The insert clock, which orders the billing events for the processor: what `inorder migrate --table
	// billing_events` adds, online, and keeps as it is when run again.
	if err := migrations.AddClock(ctx, conn, "billing_events", migrations.ClockOpts{}); err != nil {
		return fmt.Errorf("add the insert clock to billing_events: %w", err)
	}
	return nil
}

// querier is a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// recordEvent records one billable event and returns its id. The statement takes the next sequence
// number of the customer under the customer's row lock, so concurrent events of one customer get
// increasing numbers in the order they are created.
func recordEvent(ctx context.Context, q querier, customer, kind string, amountCents int64) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `
		WITH next AS (
			INSERT INTO customers (id, last_seq) VALUES ($1, 1)
			ON CONFLICT (id) DO UPDATE SET last_seq = customers.last_seq + 1
			RETURNING last_seq
		)
		INSERT INTO billing_events (customer_id, seq, kind, amount_cents)
		SELECT $1, last_seq, $2, $3 FROM next
		RETURNING id`, customer, kind, amountCents).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record %s event of %s: %w", kind, customer, err)
	}
	return id, nil
}

// recordDemoEvents records a booking and two usage events for each of three customers.
func recordDemoEvents(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	for _, customer := range []string{"cus_alice", "cus_bob", "cus_carol"} {
		for i, kind := range []string{"booking", "usage", "usage"} {
			if _, err := recordEvent(ctx, conn, customer, kind, int64(1000+250*i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// run starts the payment processor psp and delivers billing_events to its webhook until ctx is done.
// Options, when given, adjust the processor's configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, psp *paymentProcessor, log zerolog.Logger,
	options ...func(*processor.Config[handlers.Row])) error {
	url, stopPSP, err := psp.start()
	if err != nil {
		return err
	}
	defer stopPSP()

	sink, err := webhook.New[handlers.Row](webhook.Config{URL: url, Secret: psp.secret, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	cc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg := processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning, // registered anew: from the first row; once registered, its position
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source: inordertype.Source{
			Table:     "billing_events",
			KeyColumn: "customer_id", // sent as "key" in each request
			Columns:   []string{"id", "customer_id", "seq", "kind", "amount_cents"},
		},
		Handler: sink,
		Logger:  log,
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
