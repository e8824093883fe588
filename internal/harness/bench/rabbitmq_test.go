package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/rabbitmqtest"
	"github.com/inorder-dev/inorder/processor"
)

// Sizes of the RabbitMQ measures.
const (
	rabbitKeys     = 64    // aggregates (routing keys) the outbox is spread over
	rabbitRowsOne  = 2000  // one record in flight
	rabbitRowsMany = 20000 // 64 in flight
	rabbitInFlight = 64
)

// rabbitmqLines are the RabbitMQ lines of the table: the amqp091-go client alone, then inorder beside it.
func rabbitmqLines() []line {
	return []line{
		{key: "rabbitmq_raw1", label: "amqp091-go to RabbitMQ, 1 publisher, confirmed", limit: true},
		{key: "rabbitmq_raw64", label: "amqp091-go to RabbitMQ, 64 publishers, confirmed", limit: true},
		{key: "rabbitmq1", label: "inorder rabbitmq, in flight 1", ref: "rabbitmq_raw1", refLabel: "amqp091-go, 1 publisher"},
		{key: "rabbitmq64", label: "inorder rabbitmq, in flight 64", ref: "rabbitmq_raw64", refLabel: "amqp091-go, 64 publishers"},
	}
}

// rabbitmqNote is the footnote on the RabbitMQ lines.
func rabbitmqNote(note func(format string, args ...any)) {
	note("rabbitmq: a throwaway node of Debian's rabbitmq-server on the same machine, over loopback, a topic "+
		"exchange routing every record to one durable classic queue; persistent messages, mandatory, each "+
		"waiting for its publisher confirm; the outbox spread over %d keys (the routing keys), %s rows with one "+
		"in flight and %s with %d; inorder with checkpoint batch and BatchSize 1000, the keyed window making %d "+
		"at once on the handler's one channel. The references are the amqp091-go client publishing the same "+
		"messages to the same exchange on one confirming channel: one goroutine, and %d goroutines each "+
		"publishing its share one message after another and waiting for each confirm, with no database.",
		rabbitKeys, thousands(rabbitRowsOne), thousands(rabbitRowsMany), rabbitInFlight, rabbitInFlight, rabbitInFlight)
}

// rabbitBench declares a fresh exchange routing everything to a fresh durable queue on the shared node,
// and returns the exchange's name and a function counting the queue's messages.
func rabbitBench(tb testing.TB, name string) (node *rabbitmqtest.Node, exchange string, count func() int) {
	tb.Helper()
	node = rabbitmqtest.Shared(tb)
	conn, err := amqp.Dial(node.URL())
	if err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	exchange, queue := "bench."+name, "bench."+name
	_, _ = ch.QueueDelete(queue, false, false, false) // a run before this one in the same binary
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	tb.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	return node, exchange, func() int {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			tb.Fatalf("rabbitmq: %v", err)
		}
		return q.Messages
	}
}

// measureRabbitMQRaw publishes n messages like the handler's (routing key, a small JSON body, the
// handler's properties and headers) with publishers goroutines on one confirming channel, each publishing
// its share one message at a time and waiting for each confirm.
func measureRabbitMQRaw(tb testing.TB, publishers, n int) result {
	node, exchange, count := rabbitBench(tb, fmt.Sprintf("raw%d", publishers))
	conn, err := amqp.Dial(node.URL())
	if err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		tb.Fatalf("rabbitmq: %v", err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for p := range publishers {
		wg.Go(func() {
			for g := p; g < n; g += publishers { // messages p, p+publishers, ...: this publisher's share
				id := strconv.Itoa(g)
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "k"+strconv.Itoa(g%rabbitKeys), true, false,
					amqp.Publishing{
						Headers: amqp.Table{handlers.HeaderID: id, handlers.HeaderProcess: "bench",
							handlers.HeaderCreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
							handlers.HeaderEventType: "booking.created"},
						DeliveryMode: amqp.Persistent, MessageId: "bench:" + id, Timestamp: time.Now(),
						AppId: "inorder", Type: "booking.created",
						Body: fmt.Appendf(nil, `{"booking":%d,"seats":2,"status":"created"}`, g),
					})
				if err == nil {
					var ok bool
					if ok, err = dc.WaitContext(ctx); err == nil && !ok {
						err = fmt.Errorf("message %s nacked", id)
					}
				}
				if err != nil {
					tb.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if got := count(); got != n {
		tb.Fatalf("the queue holds %d messages, want %d", got, n)
	}
	return result{n: n, elapsed: elapsed}
}

// measureRabbitMQ drains an outbox of n rows (jsonb payload, rabbitKeys keys) through the RabbitMQ handler
// with inFlight records at once, 1000-record batches and a checkpoint per batch.
func measureRabbitMQ(tb testing.TB, inFlight, n int) result {
	node, exchange, count := rabbitBench(tb, fmt.Sprintf("inorder%d", inFlight))
	db := pgtest.New(tb)
	insertOutbox(tb, db, n, rabbitKeys)
	lastID, lastAt := lastRow(tb, db, "outbox")
	noteServer(tb, db.Pool)

	h, err := rabbitmq.New(rabbitmq.Config{URL: node.URL(), Exchange: exchange})
	if err != nil {
		tb.Fatalf("rabbitmq handler: %v", err)
	}
	defer h.Close()
	if err := h.CheckExchange(context.Background()); err != nil { // connected before the clock starts
		tb.Fatalf("rabbitmq handler: %v", err)
	}
	res := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     fmt.Sprintf("bench_rabbitmq_%d", inFlight),
		Source:      inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		BatchSize:   1000,
		Checkpoint:  processor.CheckpointBatch,
	}, n, lastID, lastAt, 3*time.Minute)
	if got := count(); got != n { // nothing failed, so nothing was published twice
		tb.Fatalf("the queue holds %d messages, want %d", got, n)
	}
	return res
}

func BenchmarkRabbitMQ(b *testing.B) {
	b.Run("raw1", func(b *testing.B) {
		record(b, "rabbitmq_raw1", measureRabbitMQRaw(b, 1, rabbitRowsOne))
	})
	b.Run("inflight1", func(b *testing.B) {
		record(b, "rabbitmq1", measureRabbitMQ(b, 1, rabbitRowsOne))
	})
	b.Run("raw64", func(b *testing.B) {
		record(b, "rabbitmq_raw64", measureRabbitMQRaw(b, rabbitInFlight, rabbitRowsMany))
	})
	b.Run("inflight64", func(b *testing.B) {
		record(b, "rabbitmq64", measureRabbitMQ(b, rabbitInFlight, rabbitRowsMany))
	})
}

// TestRabbitMQMeasures runs the RabbitMQ measures on a few rows, so that the benchmark keeps working. It
// records no figures.
func TestRabbitMQMeasures(t *testing.T) {
	for name, r := range map[string]result{
		"raw1":       measureRabbitMQRaw(t, 1, 20),
		"raw64":      measureRabbitMQRaw(t, rabbitInFlight, 300),
		"inflight1":  measureRabbitMQ(t, 1, 20),
		"inflight64": measureRabbitMQ(t, rabbitInFlight, 300),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
}
