// Command embedded is an HTTP service that runs an inorder processor inside its own process, next to its
// HTTP server, and stops both cleanly on SIGTERM or Ctrl-C.
//
// POST /orders stores an order; a processor in the same program picks up each new order strictly in
// order and "sends its confirmation" (here: a log line). GET /healthz answers 200 while the database is
// reachable. The HTTP server and the processor run in one lifecycle group: the first signal stops the
// server gracefully, lets the processor finish the order in flight, make its position durable and unlock
// its cursor, and the program exits with status 0. Orders stored while it was down are confirmed after the
// next start; none is skipped.
//
// Run it against any PostgreSQL database; it creates its table if it is missing:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/embedded -addr 127.0.0.1:8080
//
// then place an order:
//
//	curl -d '{"customer":"ada@example.com","total_cents":4200}' http://127.0.0.1:8080/orders
//
// It prints "listening on <address>" once the port is open (-addr 127.0.0.1:0 picks a free port) and logs
// JSON lines to stderr, or a readable form on a terminal.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// process names the stream and its cursor row.
const process = "order_confirmations"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on; port 0 picks a free port")
	flag.Parse()
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "embedded: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	var logOut io.Writer = os.Stderr
	if isatty.IsTerminal(os.Stderr.Fd()) {
		logOut = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}
	}
	log := zerolog.New(logOut).With().Timestamp().Logger()

	// The program owns its signals: SIGTERM or Ctrl-C stops the group cleanly, and one more during that
	// stop ends the program at once, as the signal does by default. A service with its own shutdown would
	// cancel run's context instead, as the test does.
	sigs := lifecycle.NewSignalActor(context.Background(), lifecycle.SignalOpts{})
	defer sigs.Stop()
	if err := run(context.Background(), databaseURL, *addr, os.Stdout, log, sigs); err != nil {
		log.Error().Err(err).Msg("stopped")
		os.Exit(1)
	}
}

// run serves the HTTP API on addr and confirms orders until ctx is done or, when sigs is not nil, one of
// its signals arrives, then stops both. It writes "listening on <address>" to stdout once the port is
// open, and returns nil after a clean stop.
func run(ctx context.Context, databaseURL, addr string, stdout io.Writer, log zerolog.Logger, sigs *lifecycle.SignalActor) error {
	if err := setup(ctx, databaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()

	cc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	confirmations, err := processor.New(processor.Config[order]{
		StartFrom:    inordertype.StartFromBeginning, // registered anew: from the first row; once registered, its position
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "orders", Columns: []string{"id", "customer", "total_cents"}},
		Handler:      sendConfirmation(log),
		Logger:       log,
	})
	if err != nil {
		return err
	}

	g := lifecycle.New(lifecycle.Config{Logger: log})
	if sigs != nil {
		g.AddSignals(sigs)
	}
	bound, err := g.AddHTTPServer("http", addr, routes(pool, log), 10*time.Second)
	if err != nil {
		return err
	}
	g.AddRunner(confirmations)
	fmt.Fprintf(stdout, "listening on %s\n", bound)
	err = g.Run(ctx)
	var sig *lifecycle.SignalError
	if errors.As(err, &sig) {
		return nil // a signal is a clean stop: exit 0
	}
	return err
}

// setup applies inorder's migrations and creates the orders table, with inorder's insert clock.
func setup(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS orders (
			id          bigserial PRIMARY KEY,
			customer    text NOT NULL,
			total_cents bigint NOT NULL CHECK (total_cents > 0),
			created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX IF NOT EXISTS orders_created_at_id_idx ON orders (created_at, id);`)
	if err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	// The insert clock, which orders the table for the processor: what `inorder migrate --table orders`
	// adds, online, and keeps as it is when run again.
	if err := migrations.AddClock(ctx, conn, "orders", migrations.ClockOpts{}); err != nil {
		return fmt.Errorf("add the insert clock to orders: %w", err)
	}
	return nil
}

// order is one row of orders, as the processor reads it.
type order struct {
	ID         int64  `db:"id" json:"id"`
	Customer   string `db:"customer" json:"customer"`
	TotalCents int64  `db:"total_cents" json:"total_cents"`
}

// sendConfirmation stands in for the e-mail that confirms an order: it logs it. A real sender returns an
// error when the mail service refuses, and the processor tries the same order again after a backoff.
func sendConfirmation(log zerolog.Logger) handlers.HandlerFunc[order] {
	return func(ctx context.Context, rec *handlers.Record[order]) error {
		log.Info().Int64("order_id", rec.Value.ID).Str("customer", rec.Value.Customer).
			Int64("total_cents", rec.Value.TotalCents).Int("attempt", rec.Attempt).Msg("order confirmation sent")
		return nil
	}
}

// routes is the service's HTTP API.
func routes(pool *pgxpool.Pool, log zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&o); err != nil {
			http.Error(w, "malformed order: "+err.Error(), http.StatusBadRequest)
			return
		}
		if o.Customer == "" || o.TotalCents <= 0 {
			http.Error(w, "an order needs a customer and a positive total_cents", http.StatusBadRequest)
			return
		}
		err := pool.QueryRow(r.Context(), "INSERT INTO orders (customer, total_cents) VALUES ($1, $2) RETURNING id",
			o.Customer, o.TotalCents).Scan(&o.ID)
		if err != nil {
			log.Error().Err(err).Msg("store order")
			http.Error(w, "could not store the order", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := pool.Ping(r.Context()); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
