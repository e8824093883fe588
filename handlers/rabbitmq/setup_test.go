package rabbitmq_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/internal/harness/rabbitmqtest"
	"github.com/inorder-dev/inorder/internal/harness/sinktest"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestMain starts the database harness; the RabbitMQ node is the binary's shared one, started by the
// first test that asks (rabbitmqtest.Shared) and stopped when the binary exits.
func TestMain(m *testing.M) { processortest.Main(m) }

const outboxDDL = `
	CREATE TABLE outbox (
		id           bigserial PRIMARY KEY,
		aggregate_id text,
		type         text NOT NULL,
		payload      jsonb,
		created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
	);
	CREATE INDEX ON outbox (created_at, id);`

// bundle is what most tests work with: the shared node, a channel on it for declaring and reading, names
// of the test's own, and a database with the outbox table.
type bundle struct {
	node *rabbitmqtest.Node
	ch   *amqp.Channel
	name string // the test's prefix for exchanges and queues
	sinktest.Outbox
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func setup(t *testing.T) *bundle {
	t.Helper()
	node := rabbitmqtest.Shared(t)
	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	db := processortest.NewDB(t, nil)
	db.Exec(t, outboxDDL)
	sinktest.AddClock(t, db, "outbox")
	return &bundle{node: node, ch: ch, name: unsafeName.ReplaceAllString(t.Name(), "_"), Outbox: sinktest.Outbox{DB: db}}
}

// exchange declares a durable exchange of kind named after the test and returns its name.
func (b *bundle) exchange(t *testing.T, kind string) string {
	t.Helper()
	name := b.name + ".x"
	require.NoError(t, b.ch.ExchangeDeclare(name, kind, true, false, false, false, nil))
	t.Cleanup(func() { _ = b.channel(t).ExchangeDelete(name, false, false) })
	return name
}

// queue declares a durable queue named after the test and suffix, bound to exchange with each key.
func (b *bundle) queue(t *testing.T, suffix, exchange string, keys ...string) string {
	t.Helper()
	name := b.name + "." + suffix
	_, err := b.ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	for _, k := range keys {
		require.NoError(t, b.ch.QueueBind(name, k, exchange, false, nil))
	}
	t.Cleanup(func() { _, _ = b.channel(t).QueueDelete(name, false, false, false) })
	return name
}

// channel opens a new channel (the bundle's closes on a channel error).
func (b *bundle) channel(t *testing.T) *amqp.Channel {
	conn, err := amqp.Dial(b.node.URL())
	if err != nil {
		t.Logf("dial: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// newHandler returns a handler on the shared node, closed when the test ends.
func (b *bundle) newHandler(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Handler {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = b.node.URL()
	}
	h, err := rabbitmq.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// consume reads queue until want messages arrived (failing the test after 30s), acknowledging them.
func (b *bundle) consume(t *testing.T, queue string, want int) []amqp.Delivery {
	t.Helper()
	ch := b.channel(t)
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	var got []amqp.Delivery
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case d := <-ds:
			got = append(got, d)
		case <-timeout:
			t.Fatalf("queue %s: %d of %d messages: %s", queue, len(got), want, describe(got))
		}
	}
	return got
}

// rec is a record for calling Handle directly.
func rec(id, key string, payload string) *handlers.Record[handlers.Row] {
	return &handlers.Record[handlers.Row]{
		Process: "direct", ID: id, Key: key, Attempt: 1,
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		Value: handlers.Row{Columns: []string{"id", "aggregate_id", "payload"},
			Values: []any{id, key, []byte(payload)}},
	}
}

func describe(ds []amqp.Delivery) string {
	var b strings.Builder
	for i, d := range ds {
		if i == 100 {
			fmt.Fprintf(&b, "... (%d more)", len(ds)-i)
			break
		}
		fmt.Fprintf(&b, "%s/%s ", d.RoutingKey, d.MessageId)
	}
	return b.String()
}

// requireUnavailable checks that err is the sink's refusal, and that what to check mentions check.
func requireUnavailable(t *testing.T, err error, check string) {
	t.Helper()
	require.Error(t, err)
	u, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "the sink's refusal (Unavailable): %v", err)
	require.Contains(t, u.Check, check)
	require.False(t, handlers.IsPermanent(err), "not the record's: %v", err)
}
