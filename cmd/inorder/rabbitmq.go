package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/rabbitmq"
	"github.com/inorder-dev/inorder/processor"
)

// rabbitmqFlags are the flags of `inorder run --handler rabbitmq`.
type rabbitmqFlags struct {
	envelope      *cloudevent.Envelope // from --envelope, set by runFlags.newHandler
	url           string
	exchange      string
	routingKey    string
	payloadColumn string
	typeColumn    string
	maxInFlight   int
}

func (r *rabbitmqFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "rabbitmq-url", "", "rabbitmq: broker URL, amqp://user:password@host:5672/vhost (INORDER_RABBITMQ_URL keeps the password off the command line)")
	fs.StringVar(&r.exchange, "rabbitmq-exchange", "", "rabbitmq: exchange records are published to; it must exist (amq.default: the default exchange, routing to the queue named by the routing key)")
	fs.StringVar(&r.routingKey, "rabbitmq-routing-key", "", "rabbitmq: routing key of every record (default each record's key column)")
	fs.StringVar(&r.payloadColumn, "rabbitmq-payload-column", handlers.DefaultPayloadColumn, "rabbitmq: column sent as the message body (whole record as JSON without it)")
	fs.StringVar(&r.typeColumn, "rabbitmq-type-column", "", "rabbitmq: column sent as the message type and event_type header (default type, else event_type)")
	fs.IntVar(&r.maxInFlight, "rabbitmq-max-in-flight", 1, "rabbitmq: records awaiting the broker's confirm at once, in order per key (records of one key one at a time)")
}

// set reports whether any --rabbitmq-* flag differs from its default.
func (r *rabbitmqFlags) set() bool {
	return r.url != "" || r.exchange != "" || r.routingKey != "" || r.payloadColumn != handlers.DefaultPayloadColumn ||
		r.typeColumn != "" || r.maxInFlight != 1
}

// newHandler checks the flags, connects to the broker, checks that the exchange exists, and returns the
// RabbitMQ handler and a function that closes its connection.
func (r *rabbitmqFlags) newHandler(ctx context.Context, cfg processor.Config[handlers.Row]) (handlers.Handler[handlers.Row], func(), error) {
	if r.url == "" {
		return nil, nil, usageErr("--handler rabbitmq needs --rabbitmq-url (or INORDER_RABBITMQ_URL): amqp://user:password@host:5672/vhost")
	}
	if r.exchange == "" {
		return nil, nil, usageErr("--handler rabbitmq needs --rabbitmq-exchange (amq.default for the default exchange)")
	}
	if r.maxInFlight < 1 {
		return nil, nil, usageErr("--rabbitmq-max-in-flight must be at least 1, got %d", r.maxInFlight)
	}
	exchange := r.exchange
	if exchange == "amq.default" {
		exchange = ""
	}
	h, err := rabbitmq.New(rabbitmq.Config{URL: r.url, Exchange: exchange, RoutingKey: r.routingKey,
		PayloadColumn: namedColumn(r.payloadColumn, handlers.DefaultPayloadColumn), TypeColumn: r.typeColumn,
		Envelope: r.envelope})
	if err != nil {
		return nil, nil, usageErr("--rabbitmq-*: %v", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, handlerTimeout(cfg))
	defer cancel()
	if err := h.CheckExchange(checkCtx); err != nil {
		_ = h.Close()
		if u, ok := handlers.UnavailableOf(err); ok {
			return nil, nil, fmt.Errorf("%w (check %s)", err, u.Check)
		}
		return nil, nil, err
	}
	return h, func() { _ = h.Close() }, nil
}
