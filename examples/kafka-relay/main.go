// Command kafka-relay relays a transactional outbox to a Kafka topic, each aggregate's events in order in
// its partition, the aggregate id as the record key.
//
// The application appends an event to the outbox table in the same transaction that changes the aggregate,
// so the event exists if and only if the change does. A processor reads the outbox in (created_at, id)
// order and produces each row with kafka.New: aggregate_id is the record key (so an aggregate's events
// share a partition, as Debezium's outbox router keys them), the payload column is the value and type the
// event_type header. Up to 16 events of different aggregates are produced at once, one at a time per
// aggregate, each after the one before it was acknowledged. The position moves past a row only once the
// brokers have acknowledged its record, so no event is lost, and the events of one aggregate are stored in
// the order they were written.
//
// With KAFKA_BROKERS set (host:port, comma-separated), the program produces to that cluster. Without it,
// it starts kfake, an in-process Kafka cluster speaking the real protocol, and prints what was produced
// when it stops. Either way it creates the topic if it is missing, appends a few demo events and relays
// until Ctrl-C:
//
//	DATABASE_URL=postgres://postgres@localhost:5432/postgres go run ./examples/kafka-relay
//
//	KAFKA_BROKERS=localhost:9092 DATABASE_URL=postgres://... go run ./examples/kafka-relay
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/migrations"
	"github.com/inorder-dev/inorder/processor"
)

const (
	// process names the stream and its cursor row.
	process = "outbox_relay"
	// topic is the topic every outbox event goes to.
	topic = "outbox-events"
	// partitions is how many partitions the topic gets when the program creates it.
	partitions = 3
	// window is how many events of different aggregates are produced at once.
	window = 16
)

func main() {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		fmt.Fprintln(os.Stderr, "kafka-relay: set DATABASE_URL, for example DATABASE_URL=postgres://postgres@localhost:5432/postgres")
		os.Exit(2)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := relay(ctx, databaseURL, os.Getenv("KAFKA_BROKERS"), log); err != nil {
		log.Fatal().Err(err).Msg("relay")
	}
}

// relay connects to Kafka, prepares the database, appends the demo events and relays the outbox until
// ctx is done. With the in-process cluster it then prints what was produced.
func relay(ctx context.Context, databaseURL, brokers string, log zerolog.Logger) error {
	client, fake, closeClient, err := connect(brokers)
	if err != nil {
		return err
	}
	defer closeClient()
	if err := createTopic(ctx, client); err != nil {
		return err
	}
	if err := setup(ctx, databaseURL); err != nil {
		return err
	}
	if err := appendDemoEvents(ctx, databaseURL); err != nil {
		return err
	}
	err = run(ctx, databaseURL, client, log)
	if fake != nil {
		recs, rerr := produced(context.Background(), fake)
		if rerr != nil {
			return errors.Join(err, rerr)
		}
		printProduced(os.Stdout, recs)
	}
	return err
}

// connect returns a producing client and a function that closes it. With brokers (KAFKA_BROKERS) set, the
// client connects to them. Otherwise connect starts kfake, an in-process Kafka cluster, and returns it too.
//
// franz-go's defaults are what the handler needs (an idempotent producer, acks from all in-sync
// replicas); the delivery timeout makes the client give up on a record before the processor's handler
// timeout (30s by default) does, so that a record it could not deliver is not written twice.
func connect(brokers string) (*kgo.Client, *kfake.Cluster, func(), error) {
	var fake *kfake.Cluster
	seeds := strings.Split(brokers, ",")
	if brokers == "" {
		var err error
		if fake, err = kfake.NewCluster(); err != nil {
			return nil, nil, nil, fmt.Errorf("kafka fake: %w", err)
		}
		seeds = fake.ListenAddrs()
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordDeliveryTimeout(10*time.Second))
	if err != nil {
		if fake != nil {
			fake.Close()
		}
		return nil, nil, nil, fmt.Errorf("kafka client for %s: %w", strings.Join(seeds, ","), err)
	}
	return client, fake, func() {
		client.Close()
		if fake != nil {
			fake.Close()
		}
	}, nil
}

// createTopic creates the topic with the brokers' default replication unless it exists.
func createTopic(ctx context.Context, client *kgo.Client) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, -1
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

// run produces the outbox to the topic until ctx is done. Options, when given, adjust the processor's
// configuration (the tests shorten its timings).
func run(ctx context.Context, databaseURL string, client *kgo.Client, log zerolog.Logger,
	options ...func(*processor.Config[handlers.Row])) error {
	sink, err := kafka.New(kafka.Config{Client: client, Topic: topic})
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
		// The payload column becomes the value, type the event_type header, and the key column the
		// record key.
		Source:      inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:     sink,
		MaxInFlight: window,
		Logger:      log,
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

// produced reads back every record the in-process cluster holds on the topic, in the order of each
// partition, partition by partition.
func produced(ctx context.Context, fake *kfake.Cluster) ([]*kgo.Record, error) {
	infos := fake.PartitionInfos(topic)
	var want int64
	for _, p := range infos {
		want += p.HighWatermark
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byPartition := make([][]*kgo.Record, len(infos))
	for n := int64(0); n < want; {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read back %d records of %s: %d read: %w", want, topic, n, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			byPartition[r.Partition] = append(byPartition[r.Partition], r)
		})
	}
	var out []*kgo.Record
	for _, recs := range byPartition {
		out = append(out, recs...)
	}
	return out, nil
}

// printProduced prints records with their partition, key, type and value.
func printProduced(w io.Writer, recs []*kgo.Record) {
	fmt.Fprintf(w, "%d records produced:\n", len(recs))
	for _, r := range recs {
		var typ, id string
		for _, h := range r.Headers {
			switch h.Key {
			case handlers.HeaderEventType:
				typ = string(h.Value)
			case handlers.HeaderID:
				id = string(h.Value)
			}
		}
		fmt.Fprintf(w, "  partition=%d offset=%d key=%s %s=%s %s=%s value=%s\n", r.Partition, r.Offset, r.Key,
			handlers.HeaderEventType, typ, handlers.HeaderID, id, r.Value)
	}
}
