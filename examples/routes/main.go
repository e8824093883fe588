// Command routes sends one outbox three ways, each route a process with its own filter, cursor and sink:
// the payment events to the payment provider's webhook, every event to Kafka for analytics, and the
// shipment events to standard output, for a warehouse's log shipper.
//
// A route reads only the rows its filter (Source.Where) keeps: the filter is part of the read, so the
// rows it passes over are never sent to it, cost it no handler call, and are not read again (its position
// moves past them up to the horizon). A partial index per selective filter serves its read: the webhook's
// route reads the payments' index, not the whole table. Each route keeps the order of its events per
// aggregate, and never skips one, exactly as a process without a filter does.
//
// The three processors share one processor.Client, so the three routes hold four connections between
// them, as `inorder run --config` does with its processes (see README.md for the same routes as a
// configuration file).
//
// With KAFKA_BROKERS set (host:port, comma-separated) the program produces to that cluster, and with
// WEBHOOK_URL set it posts the payments there (signed with WEBHOOK_SECRET). Without them it starts kfake,
// an in-process Kafka cluster speaking the real protocol, and a local receiver that prints what it is
// posted. It appends a few demo events and routes until Ctrl-C:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/routes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/handlers/stdout"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

// The routes: a process name each, and the filters of the two that take a part of the outbox.
const (
	paymentsRoute  = "payments_webhook"
	analyticsRoute = "analytics_kafka"
	shipmentsRoute = "shipments_stdout"

	paymentsWhere  = "type LIKE 'payment.%'"
	shipmentsWhere = "type = 'shipment.dispatched'"

	// topic is the analytics topic, which takes every event.
	topic = "outbox-events"
)

func main() {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "routes: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := route(ctx, databaseURL, log); err != nil {
		log.Fatal().Err(err).Msg("routes")
	}
}

// route sets up the sinks (in-process ones where none is configured), the database and the demo events,
// and routes the outbox until ctx is done.
func route(ctx context.Context, databaseURL string, log zerolog.Logger) error {
	seeds := os.Getenv("KAFKA_BROKERS")
	if seeds == "" {
		fake, err := kfake.NewCluster()
		if err != nil {
			return fmt.Errorf("kafka fake: %w", err)
		}
		defer fake.Close()
		seeds = strings.Join(fake.ListenAddrs(), ",")
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(seeds, ",")...), kgo.RecordDeliveryTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("kafka client for %s: %w", seeds, err)
	}
	defer client.Close()
	if err := createTopic(ctx, client); err != nil {
		return err
	}
	hook := Webhook{URL: os.Getenv("WEBHOOK_URL"), Secret: []byte(os.Getenv("WEBHOOK_SECRET"))}
	if hook.URL == "" {
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Printf("webhook received: %s\n", body)
		}))
		defer receiver.Close()
		hook = Webhook{URL: receiver.URL, Secret: []byte("demo-secret")}
	}
	if err := setup(ctx, databaseURL); err != nil {
		return err
	}
	if err := appendDemoEvents(ctx, databaseURL); err != nil {
		return err
	}
	return run(ctx, databaseURL, Sinks{Kafka: client, Webhook: hook, Stdout: os.Stdout}, log)
}

// Webhook is where the payments route posts, and the key it signs with.
type Webhook struct {
	URL    string
	Secret []byte
}

// Sinks are the three routes' destinations.
type Sinks struct {
	Kafka   *kgo.Client
	Webhook Webhook
	Stdout  io.Writer
}

// createTopic creates the analytics topic with the brokers' default replication unless it exists.
func createTopic(ctx context.Context, client *kgo.Client) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 3, -1
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	return nil
}

// setup applies inorder's migrations, creates the outbox with the insert clock, and the partial indexes
// that serve the selective routes: each orders the rows its filter keeps as the read orders them, by
// coalesce(inorder_at, created_at) and id.
func setup(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn); err != nil {
		return err
	}
	if _, err = conn.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS outbox (
			id           bigserial PRIMARY KEY,
			aggregate_id text NOT NULL,
			type         text NOT NULL,
			payload      jsonb NOT NULL,
			created_at   timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
		return fmt.Errorf("create outbox table: %w", err)
	}
	if err := migrations.AddClock(ctx, conn, "outbox", migrations.ClockOpts{}); err != nil {
		return err
	}
	for name, where := range map[string]string{"outbox_payments_idx": paymentsWhere, "outbox_shipments_idx": shipmentsWhere} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s
			ON outbox ((coalesce(inorder_at, created_at)), id) WHERE %s`, name, where)); err != nil {
			return fmt.Errorf("create index %s: %w", name, err)
		}
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

// appendDemoEvents appends the life of an order.
func appendDemoEvents(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	for _, typ := range []string{"order.placed", "payment.authorized", "payment.captured", "shipment.dispatched", "order.completed"} {
		if _, err := appendEvent(ctx, conn, "order-1001", typ, map[string]string{"order_id": "order-1001"}); err != nil {
			return err
		}
	}
	return nil
}

// run routes the outbox until ctx is done: three processors on one client. Options, when given, adjust
// each processor's configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, sinks Sinks, log zerolog.Logger,
	options ...func(*processor.Config[handlers.Row])) error {
	cc, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc})
	if err != nil {
		return err
	}
	defer client.Close()
	toKafka, err := kafka.New(kafka.Config{Client: sinks.Kafka, Topic: topic})
	if err != nil {
		return err
	}
	toWebhook, err := webhook.New[handlers.Row](webhook.Config{URL: sinks.Webhook.URL, Secret: sinks.Webhook.Secret})
	if err != nil {
		return err
	}
	routes := []processor.Config[handlers.Row]{
		{Process: paymentsRoute, Source: inordertype.Source{Table: "outbox", Where: paymentsWhere}, Handler: toWebhook},
		{Process: analyticsRoute, Source: inordertype.Source{Table: "outbox"}, Handler: toKafka, MaxInFlight: 16},
		{Process: shipmentsRoute, Source: inordertype.Source{Table: "outbox", Where: shipmentsWhere},
			Handler: stdout.New[handlers.Row](sinks.Stdout)},
	}
	for _, cfg := range routes {
		cfg.Client, cfg.StartFrom, cfg.Logger = client, inordertype.StartFromBeginning, log
		cfg.Source.KeyColumn = "aggregate_id"
		for _, option := range options {
			option(&cfg)
		}
		p, err := processor.New(cfg)
		if err != nil {
			return err
		}
		client.Add(p)
	}
	return client.Run(ctx)
}
