package processor_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// Booking is a row of the source table; the db tags name its columns.
type Booking struct {
	ID       int64  `db:"id"`
	Customer string `db:"customer"`
	Seats    int    `db:"seats"`
}

// Example delivers the rows of a bookings table to a handler, in order, and stops.
func Example() {
	ctx := context.Background()
	url := pgtest.ExampleURL() // any database where `inorder migrate` ran
	conn, _ := pgx.Connect(ctx, url)
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `
		CREATE TABLE bookings (
			id         bigserial PRIMARY KEY,
			customer   text NOT NULL,
			seats      int NOT NULL,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX ON bookings (created_at, id);`)
	// The insert clock: what `inorder migrate --table bookings` adds, online.
	_ = migrations.AddClock(ctx, conn, "bookings", migrations.ClockOpts{})
	_, _ = conn.Exec(ctx, `INSERT INTO bookings (customer, seats) VALUES ('ada', 2), ('grace', 1), ('ada', 4)`)

	ctx, stop := context.WithCancel(ctx)
	delivered := 0
	cc, _ := pgx.ParseConfig(url)
	p, err := processor.New(processor.Config[Booking]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "booking_sms",
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		Source:       inordertype.Source{Table: "bookings", Columns: []string{"id", "customer", "seats"}},
		Handler: handlers.HandlerFunc[Booking](func(ctx context.Context, rec *handlers.Record[Booking]) error {
			fmt.Printf("booking %d: %d seats for %s\n", rec.Value.ID, rec.Value.Seats, rec.Value.Customer)
			if delivered++; delivered == 3 {
				stop() // a real program stops on SIGTERM, through package lifecycle
			}
			return nil // the position moves past the record only now
		}),
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	if err := p.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// booking 1: 2 seats for ada
	// booking 2: 1 seats for grace
	// booking 3: 4 seats for ada
}

// ExampleClient runs two processes of one instance on the connections of one Client: however many
// processes a service embeds, and however many it stands by for, it opens at most MaxConns connections.
func ExampleClient() {
	ctx := context.Background()
	url := pgtest.ExampleURL() // any database where `inorder migrate` ran
	conn, _ := pgx.Connect(ctx, url)
	defer conn.Close(ctx)
	for _, table := range []string{"invoices", "refunds"} {
		_, _ = conn.Exec(ctx, `
			CREATE TABLE `+table+` (
				id         bigserial PRIMARY KEY,
				customer   text NOT NULL,
				seats      int NOT NULL,
				created_at timestamptz NOT NULL DEFAULT clock_timestamp()
			);
			CREATE INDEX ON `+table+` (created_at, id);`)
		_ = migrations.AddClock(ctx, conn, table, migrations.ClockOpts{}) // inorder migrate --table
		_, _ = conn.Exec(ctx, `INSERT INTO `+table+` (customer, seats) VALUES ('grace', 1)`)
	}

	cc, _ := pgx.ParseConfig(url)
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, MaxConns: 3})
	if err != nil {
		panic(err)
	}
	defer client.Close() // after the processors stopped

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	lines := map[string]string{}
	for _, table := range []string{"invoices", "refunds"} {
		p, err := processor.New(processor.Config[Booking]{
			Client:    client, // its database and instance; no connection of its own
			StartFrom: inordertype.StartFromBeginning,
			Process:   table + "_mail",
			Source:    inordertype.Source{Table: table, Columns: []string{"id", "customer", "seats"}},
			Handler: handlers.HandlerFunc[Booking](func(ctx context.Context, rec *handlers.Record[Booking]) error {
				mu.Lock()
				defer mu.Unlock()
				lines[rec.Process] = fmt.Sprintf("%s: %d seats for %s", rec.Process, rec.Value.Seats, rec.Value.Customer)
				if len(lines) == 2 {
					stop()
				}
				return nil
			}),
			PollInterval: 50 * time.Millisecond,
			Logger:       zerolog.Nop(),
		})
		if err != nil {
			panic(err)
		}
		client.Add(p)
	}
	if err := client.Run(ctx); err != nil { // or add each processor to a lifecycle.Group
		panic(err)
	}
	fmt.Println(lines["refunds_mail"])
	// Output:
	// refunds_mail: 1 seats for grace
}
