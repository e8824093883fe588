package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/rabbitmqtest"
)

// TestRabbitMQFlagsGetOneClearLine checks that every wrong use of the RabbitMQ flags, and an exchange that
// does not exist, stop the start with one line naming what is wrong, before any position moves.
func TestRabbitMQFlagsGetOneClearLine(t *testing.T) {
	t.Parallel()
	node := rabbitmqtest.Shared(t)
	b := setup(t)
	b.book(t, 1, "1")
	args := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "rabbitmq", "--rabbitmq-url", node.URL(), "--rabbitmq-exchange", "amq.direct"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no url", runArgs("--handler", "rabbitmq", "--rabbitmq-exchange", "x"), 2,
			"inorder run: --handler rabbitmq needs --rabbitmq-url (or INORDER_RABBITMQ_URL): amqp://user:password@host:5672/vhost"},
		{"no exchange", runArgs("--handler", "rabbitmq", "--rabbitmq-url", node.URL()), 2,
			"--handler rabbitmq needs --rabbitmq-exchange (amq.default for the default exchange)"},
		{"bad url", runArgs("--handler", "rabbitmq", "--rabbitmq-url", "http://x", "--rabbitmq-exchange", "x"), 2,
			"--rabbitmq-*: rabbitmq: Config.URL: "},
		{"window below one", args("--rabbitmq-max-in-flight", "0"), 2, "--rabbitmq-max-in-flight must be at least 1, got 0"},
		{"rabbitmq flags with stdout", runArgs("--rabbitmq-exchange", "x"), 2, "--rabbitmq-* flags need --handler rabbitmq"},
		{"webhook flags with rabbitmq", args("--webhook-url", "http://x"), 2, "--webhook-* and --pubsub-* flags contradict --handler rabbitmq"},
		{"missing exchange", args("--rabbitmq-exchange", "no-such-exchange"), 1,
			`inorder run: rabbitmq: exchange "no-such-exchange" does not exist on amqp://` + node.Addr() +
				` (virtual host "/") (check the exchange "no-such-exchange": declare it, or correct the name)`},
		{"broker down", args("--rabbitmq-url", "amqp://guest:guest@127.0.0.1:1/"), 1,
			"inorder run: rabbitmq: connect to amqp://127.0.0.1:1 (virtual host \"/\"): "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, b.env, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
	require.Empty(t, b.position(t), "no position moved")
}

// rabbitDelivery is one message a queue handed to the test's consumer.
type rabbitDelivery struct {
	queue, messageID, id, key string
	row                       struct {
		ID          int64  `json:"id"`
		AggregateID string `json:"aggregate_id"`
	}
}

// TestRabbitMQSurvivesTwoSIGKILLs relays 1,200 bookings of 40 customers to a direct exchange with a queue
// per customer, with a window of 32, and SIGKILLs `inorder run` twice while it publishes. Read back with
// the RabbitMQ client: every booking is there, the first delivery of each in order per customer, and
// every redelivery after a crash carries the message_id of the booking it repeats.
func TestRabbitMQSurvivesTwoSIGKILLs(t *testing.T) {
	t.Parallel()
	node := rabbitmqtest.Shared(t)
	b := setup(t)
	const customers, total = 40, 1200
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount, details)
		SELECT 'customer-' || (g %% %d), 1, jsonb_build_object('seats', g) FROM generate_series(1, %d) g`, customers, total))

	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	const exchange = "sigkill.bookings"
	require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, true, false, false, false, nil))
	var mu sync.Mutex
	var got []rabbitDelivery
	distinct := map[string]bool{}
	for c := range customers {
		key := "customer-" + strconv.Itoa(c)
		q := "sigkill." + key
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		require.NoError(t, err)
		require.NoError(t, ch.QueueBind(q, key, exchange, false, nil))
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
		require.NoError(t, err)
		go func() {
			for d := range ds {
				r := rabbitDelivery{queue: q, messageID: d.MessageId, key: d.RoutingKey}
				r.id, _ = d.Headers["inorder_id"].(string)
				_ = json.Unmarshal(d.Body, &r.row)
				mu.Lock()
				got = append(got, r)
				distinct[r.id] = true
				mu.Unlock()
			}
		}()
	}
	consumed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(distinct)
	}
	args := runArgs("--columns", "id,aggregate_id", "--handler", "rabbitmq", "--rabbitmq-url", node.URL(),
		"--rabbitmq-exchange", exchange, "--rabbitmq-max-in-flight", "32")

	// Two SIGKILLs while records are in flight, then a run to the end.
	for _, killAt := range []int{250, 650} {
		p := startBinary(t, b.env, args...)
		require.Eventually(t, func() bool { return consumed() >= killAt }, 60*time.Second, time.Millisecond,
			"%d of %d consumed; logs:\n%s", consumed(), total, p.logs())
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t)
		t.Logf("killed at %d consumed, the position at %s", consumed(), b.position(t))
	}
	p := startBinary(t, b.env, args...)
	require.Eventually(t, func() bool { return consumed() == total && b.position(t) == strconv.Itoa(total) },
		60*time.Second, 10*time.Millisecond, "%d of %d consumed; logs:\n%s", consumed(), total, p.logs())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	mu.Lock()
	defer mu.Unlock()
	first := map[string]bool{}
	last := map[string]int64{} // queue -> highest id delivered for the first time so far
	duplicates := 0
	for i, d := range got {
		require.Equal(t, "booking_sms:"+d.id, d.messageID, "delivery %d: message_id names the booking", i)
		require.Equal(t, strconv.FormatInt(d.row.ID, 10), d.id, "delivery %d: the row is the booking named", i)
		require.Equal(t, d.row.AggregateID, d.key, "the customer is the routing key")
		require.Equal(t, "sigkill."+d.key, d.queue)
		if first[d.messageID] {
			duplicates++ // a redelivery, named by the message_id of the booking it repeats
			continue
		}
		first[d.messageID] = true
		require.Greater(t, d.row.ID, last[d.queue], "delivery %d: first deliveries in order per customer", i)
		last[d.queue] = d.row.ID
	}
	for id := 1; id <= total; id++ {
		require.True(t, first["booking_sms:"+strconv.Itoa(id)], "booking %d delivered", id)
	}
	require.Len(t, last, customers)
	t.Logf("%d deliveries: %d bookings, %d redelivered after the crashes", len(got), total, duplicates)
}
