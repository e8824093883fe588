package processortest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// Booking is a row of the bookings table that a handler under test texts customers about.
type Booking struct {
	ID       int64  `db:"id"`
	Customer string `db:"customer"`
	Seats    int    `db:"seats"`
}

// Example tests a processor the way a test of a user's handler would: it gives the test a database,
// runs the processor until it has caught up, checks what the handler got, then makes the handler fail a
// record and checks that the stream halts on it.
func Example() {
	// In a test, t is the test's *testing.T. An Example has none; this one panics where a test would fail.
	t := &exampleT{}
	defer t.done()

	db := processortest.NewDB(t, nil)
	db.Exec(t, `
		CREATE TABLE bookings (
			id         bigserial PRIMARY KEY,
			customer   text NOT NULL,
			seats      int NOT NULL,
			created_at timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX ON bookings (created_at, id);`)
	// The insert clock, which orders the table for the processor: what `inorder migrate --table bookings`
	// adds.
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		panic(err)
	}
	err = migrations.AddClock(context.Background(), conn, "bookings", migrations.ClockOpts{})
	_ = conn.Close(context.Background())
	if err != nil {
		panic(err)
	}
	db.Exec(t, "INSERT INTO bookings (customer, seats) VALUES ('ada', 2), ('grace', 1)")

	sms := &processortest.Recorder[Booking]{} // stands in for the handler that sends the texts
	p, err := processor.New(processor.Config[Booking]{
		StartFrom:    inordertype.StartFromBeginning,
		Process:      "booking_sms",
		ClientConfig: processor.ClientConfig{ConnConfig: db.ConnConfig(t)},
		Source:       inordertype.Source{Table: "bookings"},
		Handler:      sms,
		PollInterval: 10 * time.Millisecond,
		RetryMin:     10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	processortest.Start(t, p, nil) // stopped when the test ends

	processortest.WaitCaughtUp(t, db, "booking_sms", nil)
	for _, b := range sms.Values() {
		fmt.Printf("booking %d: %d seats for %s\n", b.ID, b.Seats, b.Customer)
	}

	sms.Fail("4", handlers.Permanent(errors.New("no such phone number"))) // refused: halted at once
	db.Exec(t, "INSERT INTO bookings (customer, seats) VALUES ('ada', 4), ('alan', 3)")
	halt := processortest.WaitHalted(t, db, "booking_sms", nil)
	fmt.Printf("halted on booking %s: %s; %d delivered\n", halt.RecordID, halt.Error, sms.Len())

	// Output:
	// booking 1: 2 seats for ada
	// booking 2: 1 seats for grace
	// halted on booking 4: permanent: no such phone number; 3 delivered
}

// ExampleStart runs a function that builds and runs its own processors, such as a service's run
// function, rather than a processor, and stops it in the middle of the test to check what it left.
func ExampleStart() {
	t := &exampleT{} // in a test, the test's *testing.T
	defer t.done()

	run := processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		<-ctx.Done() // a service's run would serve until then
		return nil
	}), nil)
	if err := run.Stop(); err != nil { // a clean stop returns nil
		panic(err)
	}
	fmt.Println("stopped cleanly")
	// Output: stopped cleanly
}
