package processor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/pgtest"
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
		CREATE INDEX ON bookings (created_at, id);
		INSERT INTO bookings (customer, seats) VALUES ('ada', 2), ('grace', 1), ('ada', 4);`)

	ctx, stop := context.WithCancel(ctx)
	delivered := 0
	cc, _ := pgx.ParseConfig(url)
	p, err := processor.New(processor.Config[Booking]{
		StartFrom:  cursor.StartFromBeginning,
		Process:    "booking_sms",
		ConnConfig: cc,
		Source:     processor.Source{Table: "bookings", Columns: []string{"id", "customer", "seats"}},
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
