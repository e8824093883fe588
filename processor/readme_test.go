package processor_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// sendConfirmation stands for the application's own code.
func sendConfirmation(ctx context.Context, customer string) error { return nil }

// Example_library is the README's "library in 30 lines", which TestREADMESnippetsCompile keeps identical
// to this body. It is compiled, not run: it runs until SIGTERM.
func Example_library() {
	ctx := context.Background()
	cc, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn); err != nil { // safe from every instance at once
		log.Fatal(err)
	}
	if err := migrations.AddClock(ctx, conn, "bookings", migrations.ClockOpts{}); err != nil { // online, once per table
		log.Fatal(err)
	}
	conn.Close(ctx)

	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc}) // the instance's connections, for all its processes
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	p, err := processor.New(processor.Config[Booking]{
		Client:    client,
		Process:   "booking_sms",
		Source:    inordertype.Source{Table: "bookings", Columns: []string{"id", "customer", "seats"}},
		StartFrom: inordertype.StartFromNow, // a new process: the bookings from now on (or StartFromBeginning)
		Handler: handlers.HandlerFunc[Booking](func(ctx context.Context, rec *handlers.Record[Booking]) error {
			return sendConfirmation(ctx, rec.Value.Customer) // nil: the position moves past the record
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	client.Add(p)
	sigs := lifecycle.NewSignalActor(ctx, lifecycle.SignalOpts{}) // SIGTERM: finish the record in flight, make the position durable, unlock
	defer sigs.Stop()
	var g lifecycle.Group
	g.AddSignals(sigs)
	g.AddRunner(client)
	if err := g.Run(ctx); err != nil && !errors.As(err, new(*lifecycle.SignalError)) {
		log.Fatal(err) // `process "booking_sms": ...` — something retrying cannot fix
	}
}
