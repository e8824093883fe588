// Command pubsub-relay relays a transactional outbox to a Google Cloud Pub/Sub topic, each aggregate's
// events in order under its ordering key.
//
// The application appends an event to the outbox table in the same transaction that changes the aggregate,
// so the event exists if and only if the change does. A processor reads the outbox in (created_at, id)
// order and publishes each row with pubsub.New: the payload column is the message data, aggregate_id the
// ordering key and type the event_type attribute. The position moves past a row only once Pub/Sub has
// acknowledged its message, so no event is lost, and the events of one aggregate are stored in the order
// they were written.
//
// With PUBSUB_EMULATOR_HOST set, the program publishes to that emulator (the client library honours the
// variable). Without it, it starts pstest, an in-process fake of Pub/Sub, connects to it over gRPC and
// prints what was published when it stops. Either way it creates the topic if it is missing, appends a few
// demo events and relays until Ctrl-C:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/pubsub-relay
//
//	gcloud beta emulators pubsub start --host-port=localhost:8085 &
//	PUBSUB_EMULATOR_HOST=localhost:8085 DATABASE_URL=postgres://... go run ./examples/pubsub-relay
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

const (
	// process names the stream and its cursor row.
	process = "outbox_relay"
	// project is the Google Cloud project of the topic; the emulator and the fake accept any.
	project = "inorder-example"
	// topicID is the topic every outbox event goes to.
	topicID = "outbox-events"
)

func main() {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "pubsub-relay: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := relay(ctx, databaseURL, os.Getenv("PUBSUB_EMULATOR_HOST"), log); err != nil {
		log.Fatal().Err(err).Msg("relay")
	}
}

// relay connects to Pub/Sub, prepares the database, appends the demo events and relays the outbox until
// ctx is done. With the in-process fake it then prints what was published.
func relay(ctx context.Context, databaseURL, emulatorHost string, log zerolog.Logger) error {
	client, fake, closeClient, err := connect(ctx, project, emulatorHost)
	if err != nil {
		return err
	}
	defer closeClient()
	if err := setup(ctx, databaseURL); err != nil {
		return err
	}
	if err := appendDemoEvents(ctx, databaseURL); err != nil {
		return err
	}
	err = run(ctx, databaseURL, client, log)
	if fake != nil {
		printPublished(os.Stdout, fake.Messages())
	}
	return err
}

// connect returns a Pub/Sub client and a function that closes it. When emulatorHost
// (PUBSUB_EMULATOR_HOST) is set, the client library connects to that emulator by itself. Otherwise connect
// starts pstest, an in-process fake of Pub/Sub, connects to it over gRPC and returns the fake too.
func connect(ctx context.Context, project, emulatorHost string) (*gpubsub.Client, *pstest.Server, func(), error) {
	if emulatorHost != "" {
		client, err := gpubsub.NewClient(ctx, project)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("pubsub emulator at %s: %w", emulatorHost, err)
		}
		return client, nil, func() { _ = client.Close() }, nil
	}
	fake := pstest.NewServer()
	client, err := gpubsub.NewClient(ctx, project,
		option.WithEndpoint(fake.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		_ = fake.Close()
		return nil, nil, nil, fmt.Errorf("pubsub fake: %w", err)
	}
	return client, fake, func() { _ = client.Close(); _ = fake.Close() }, nil
}

// setup applies inorder's migrations and creates the outbox table, with inorder's insert clock.
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
		CREATE TABLE IF NOT EXISTS outbox (
			id           bigserial PRIMARY KEY,
			aggregate_id text NOT NULL,
			type         text NOT NULL,
			payload      jsonb NOT NULL,
			created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
		);
		CREATE INDEX IF NOT EXISTS outbox_created_at_id_idx ON outbox (created_at, id);`)
	if err != nil {
		return fmt.Errorf("create outbox table: %w", err)
	}
	// The insert clock, which orders the table for the processor: what `inorder migrate --table outbox`
	// adds, online, and keeps as it is when run again.
	if err := migrations.AddClock(ctx, conn, "outbox", migrations.ClockOpts{}); err != nil {
		return fmt.Errorf("add the insert clock to outbox: %w", err)
	}
	return nil
}

// querier is a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appendEvent appends one event to the outbox and returns its id. An application calls it with the
// transaction that changes the aggregate.
func appendEvent(ctx context.Context, q querier, aggregateID, typ string, payload any) (int64, error) {
	data, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("encode %s payload: %w", typ, err)
	}
	var id int64
	err = q.QueryRow(ctx, "INSERT INTO outbox (aggregate_id, type, payload) VALUES ($1, $2, $3) RETURNING id",
		aggregateID, typ, json.RawMessage(data)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("append %s of %s: %w", typ, aggregateID, err)
	}
	return id, nil
}

// appendDemoEvents appends the lives of two orders, interleaved.
func appendDemoEvents(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	events := []struct{ order, typ string }{
		{"order-1001", "order.placed"}, {"order-1002", "order.placed"}, {"order-1001", "order.paid"},
		{"order-1002", "order.cancelled"}, {"order-1001", "order.shipped"},
	}
	for _, e := range events {
		if _, err := appendEvent(ctx, conn, e.order, e.typ, map[string]string{"order_id": e.order}); err != nil {
			return err
		}
	}
	return nil
}

// run publishes the outbox to the topic until ctx is done. Options, when given, adjust the processor's
// configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, client *gpubsub.Client, log zerolog.Logger,
	options ...func(*processor.Config[handlers.Row])) error {
	topic := "projects/" + client.Project() + "/topics/" + topicID
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	sink, err := pubsub.New(pubsub.Config{Client: client, Topic: topic})
	if err != nil {
		return err
	}
	defer sink.Close() //nolint:errcheck // Close always returns nil

	cc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg := processor.Config[handlers.Row]{
		StartFrom:    inordertype.StartFromBeginning, // registered anew: from the first row; once registered, its position
		Process:      process,
		ClientConfig: processor.ClientConfig{ConnConfig: cc},
		// The payload column becomes the message data, type the event_type attribute, and the key
		// column the ordering key.
		Source:  inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
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

// printPublished prints the messages the fake stored, in the order it stored them.
func printPublished(w io.Writer, msgs []*pstest.Message) {
	fmt.Fprintf(w, "%d messages published:\n", len(msgs))
	for _, m := range msgs {
		fmt.Fprintf(w, "  key=%s %s=%s %s=%s data=%s\n", m.OrderingKey, handlers.HeaderEventType,
			m.Attributes[handlers.HeaderEventType], handlers.HeaderID, m.Attributes[handlers.HeaderID], m.Data)
	}
}
