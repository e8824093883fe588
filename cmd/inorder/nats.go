package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/jetstream"
)

// natsCheckTimeout bounds the start-up: connecting to the server and asking which stream captures the
// subject.
const natsCheckTimeout = 10 * time.Second

// natsFlags are the flags of `inorder run --handler nats`.
type natsFlags struct {
	envelope      *cloudevent.Envelope // from --envelope, set by runFlags.newHandler
	url           string
	creds         string
	subject       string
	payloadColumn string
	typeColumn    string
	maxInFlight   int
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "nats-url", "", "nats: server URL, nats://host:port (comma-separated for a cluster)")
	fs.StringVar(&n.creds, "nats-creds", "", "nats: credentials file (JWT and NKey seed) to connect with")
	fs.StringVar(&n.subject, "nats-subject", "", "nats: subject records are published to; {key} as a token stands for the record's key (orders.{key})")
	fs.StringVar(&n.payloadColumn, "nats-payload-column", handlers.DefaultPayloadColumn, "nats: column sent as the message data (whole record as JSON without it)")
	fs.StringVar(&n.typeColumn, "nats-type-column", "", "nats: column sent in the event_type header (default type, else event_type)")
	fs.IntVar(&n.maxInFlight, "nats-max-in-flight", 1, "nats: records awaiting the stream's ack at once, in order per key (records of one key one at a time)")
}

// set reports whether any --nats-* flag differs from its default.
func (n *natsFlags) set() bool {
	return n.url != "" || n.creds != "" || n.subject != "" || n.payloadColumn != handlers.DefaultPayloadColumn ||
		n.typeColumn != "" || n.maxInFlight != 1
}

// newHandler checks the flags, connects to the server, checks that a stream captures the subject, and
// returns the JetStream handler and a function that closes its connection.
func (n *natsFlags) newHandler(ctx context.Context) (handlers.Handler[handlers.Row], func(), error) {
	if n.url == "" {
		return nil, nil, usageErr("--handler nats needs --nats-url (nats://host:port)")
	}
	if n.subject == "" {
		return nil, nil, usageErr("--handler nats needs --nats-subject")
	}
	if n.maxInFlight < 1 {
		return nil, nil, usageErr("--nats-max-in-flight must be at least 1, got %d", n.maxInFlight)
	}
	opts := []nats.Option{
		nats.Name("inorder"),
		// A server that goes away is an outage to wait out: publishes fail as the sink's until it is back.
		nats.MaxReconnects(-1),
	}
	if n.creds != "" {
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--nats-url: connect to %s: %w", n.url, err)
	}
	js, err := njs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("--nats-url: %w", err)
	}
	h, err := jetstream.New(jetstream.Config{JetStream: js, Subject: n.subject,
		PayloadColumn: namedColumn(n.payloadColumn, handlers.DefaultPayloadColumn), TypeColumn: n.typeColumn,
		Envelope: n.envelope})
	if err != nil {
		nc.Close()
		return nil, nil, usageErr("--nats-subject: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, natsCheckTimeout)
	defer cancel()
	if _, err := h.Check(cctx); err != nil {
		nc.Close()
		if errors.Is(err, njs.ErrJetStreamNotEnabled) || errors.Is(err, njs.ErrJetStreamNotEnabledForAccount) {
			return nil, nil, fmt.Errorf("--nats-url: JetStream is not enabled on %s (nats-server -js): %w", n.url, err)
		}
		return nil, nil, fmt.Errorf("--nats-subject: %w", err)
	}
	return h, nc.Close, nil
}
