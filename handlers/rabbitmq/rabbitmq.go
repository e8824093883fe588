package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// appID is the app_id property of every message.
const appID = "inorder"

// maxRoutingKey is AMQP 0-9-1's limit on a short string, which a routing key is.
const maxRoutingKey = 255

// Config configures a Handler. URL is required; every other field has a documented default.
type Config struct {
	// URL is the broker's AMQP URL, amqp://user:password@host:5672/vhost (amqps:// for TLS). The handler
	// connects on its first record (or CheckExchange) and again after the connection is lost. Required.
	URL string
	// AMQP is the client's connection configuration: TLS, SASL mechanisms, heartbeat, client properties.
	// Its zero value means the client's defaults with a 10s heartbeat and the connection named "inorder";
	// without a Dial of its own, connecting and the handshake take at most 10s, and no longer than the
	// record that connects may wait. Its Recovery must be nil: the handler reconnects by itself, and the
	// client's own recovery would reopen the channel with publishes of the old one unconfirmed.
	AMQP amqp.Config

	// Exchange is the exchange records are published to. Empty means the default exchange, which routes
	// a message to the queue named by its routing key.
	Exchange string
	// RoutingKey, when set, is every record's routing key. Empty means each record's own key (the
	// process's key column), so that a direct or topic exchange can route each key to its queue.
	RoutingKey string

	// PayloadColumn names the column whose value is the message body: json and jsonb values and strings as
	// their bytes, bytea as is, NULL as an empty body and other values as their JSON encoding. A record
	// without such a column is sent whole, as one JSON object with its columns in order; handlers.WholeRecord
	// ("-") sends every record that way. Empty means handlers.DefaultPayloadColumn ("payload"), as the Kafka
	// sink does.
	PayloadColumn string
	// TypeColumn names the column whose value is sent as the message's type property and in the
	// event_type header. Empty means the type column, or the event_type column when the record has no
	// type column.
	TypeColumn string
	// Envelope, when set, sends each record as a CloudEvent in the envelope's content mode, as the
	// CloudEvents AMQP binding says: the payload as the body, cloudEvents:
	// headers (application properties) and the content type property in binary mode, the JSON event
	// format as the body in structured mode; the type from TypeColumn. Nil means the handler's own format.
	Envelope *cloudevent.Envelope
}

// Handler publishes each record to a RabbitMQ exchange with publisher confirms and the mandatory flag,
// and returns once the broker confirmed it. It implements handlers.Handler for handlers.Row and is safe
// for concurrent use: with processor.Config.MaxInFlight above 1, the processor calls it for records of
// different keys at once, one record per key at a time, and their publishes share one channel. Close
// releases its connection.
type Handler struct {
	url        string
	amqpConfig amqp.Config
	exchange   string
	routingKey string
	// payloadColumn is Config.PayloadColumn with its default, "" for the whole record.
	payloadColumn string
	// typeColumns are the columns tried in turn for the type.
	typeColumns []string
	// reads are the columns named in the configuration, which every record must have.
	reads    []string
	envelope *cloudevent.Envelope
	// where names the broker in errors, without credentials.
	where string
	// ownDial is whether Config.AMQP.Dial was given; without it, connecting is bounded by the record's ctx.
	ownDial bool

	// routed is set once the exchange has routed a record: from then on, a record it returns is the
	// record's refusal rather than the sink's.
	routed atomic.Bool

	mu     sync.Mutex
	sess   *session // nil until the first record, or after the last one closed
	closed bool
}

var (
	_ handlers.Handler[handlers.Row] = (*Handler)(nil)
	_ handlers.ColumnReader          = (*Handler)(nil)
)

// New checks cfg and returns a handler. It makes no connection: the first record or CheckExchange does.
func New(cfg Config) (*Handler, error) {
	if cfg.URL == "" {
		return nil, errors.New("rabbitmq: Config.URL is required")
	}
	u, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: Config.URL: %w", err)
	}
	if cfg.AMQP.Recovery != nil {
		return nil, errors.New("rabbitmq: Config.AMQP.Recovery must be nil: the handler reconnects by itself, and " +
			"the client's recovery would lose the confirms of the publishes in flight")
	}
	if len(cfg.RoutingKey) > maxRoutingKey {
		return nil, fmt.Errorf("rabbitmq: Config.RoutingKey is %d bytes, more than AMQP's %d", len(cfg.RoutingKey), maxRoutingKey)
	}
	ac := cfg.AMQP
	if ac.Heartbeat == 0 {
		ac.Heartbeat = 10 * time.Second
	}
	if ac.Locale == "" {
		ac.Locale = "en_US"
	}
	if ac.Properties == nil {
		ac.Properties = amqp.NewConnectionProperties()
		ac.Properties.SetClientConnectionName("inorder")
	}
	h := &Handler{
		envelope:      cfg.Envelope,
		url:           cfg.URL,
		amqpConfig:    ac,
		ownDial:       ac.Dial != nil,
		exchange:      cfg.Exchange,
		routingKey:    cfg.RoutingKey,
		payloadColumn: cfg.PayloadColumn,
		typeColumns:   []string{"type", "event_type"},
		where:         fmt.Sprintf("%s://%s:%d (virtual host %q)", u.Scheme, u.Host, u.Port, u.Vhost),
	}
	switch h.payloadColumn {
	case "":
		h.payloadColumn = handlers.DefaultPayloadColumn
	case handlers.WholeRecord:
		h.payloadColumn = "" // handlers.Row.Payload's whole row
	default:
		h.reads = append(h.reads, h.payloadColumn)
	}
	if cfg.TypeColumn != "" {
		h.typeColumns = []string{cfg.TypeColumn}
		h.reads = append(h.reads, cfg.TypeColumn)
	}
	return h, nil
}

// ReadsColumns implements handlers.ColumnReader: the payload and type columns the configuration names
// (not the default payload column, which a record may lack: it is then sent whole).
func (h *Handler) ReadsColumns() []string { return h.reads }

// exchangeName is how errors name the exchange.
func (h *Handler) exchangeName() string {
	if h.exchange == "" {
		return "the default exchange"
	}
	return fmt.Sprintf("exchange %q", h.exchange)
}

// CheckExchange connects to the broker and checks that the exchange exists (a passive declare), so that
// a wrong name stops a start with one clear line rather than every record waiting on it. The default
// exchange always exists. Its errors are handlers.Unavailable, as the same refusals met by a record are.
func (h *Handler) CheckExchange(ctx context.Context) error {
	s, err := h.session(ctx)
	if err != nil {
		return err
	}
	if h.exchange == "" {
		return nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return h.unavailable(fmt.Errorf("rabbitmq: open a channel on %s: %w", h.where, err))
	}
	defer func() { _ = ch.Close() }()
	// A passive declare only looks the exchange up; the type and flags are not compared.
	err = ch.ExchangeDeclarePassive(h.exchange, amqp.ExchangeDirect, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return handlers.Unavailable(fmt.Errorf("rabbitmq: exchange %q does not exist on %s", h.exchange, h.where),
			fmt.Sprintf("the exchange %q: declare it, or correct the name", h.exchange))
	}
	if err != nil {
		return h.unavailable(fmt.Errorf("rabbitmq: look up exchange %q on %s: %w", h.exchange, h.where, err))
	}
	return nil
}

// Close closes the connection. Records in flight fail; the handler connects again if called after.
func (h *Handler) Close() error {
	h.mu.Lock()
	s := h.sess
	h.sess = nil
	h.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.conn.Close()
}

// Handle publishes rec and waits until the broker confirmed it, refused it, or ctx is done. A record
// the broker confirmed after returning it (no queue bound for its routing key) is not delivered: Handle
// fails, with handlers.Unavailable when the exchange routes nothing at all (see the package
// documentation, "Failures"). When ctx ends first, Handle returns ctx's error, and the broker may still
// route the record: it is then published again when the processor delivers it again, after its first
// copy, so the order of a key holds. The publish itself is a write on the connection's socket, which ctx
// does not interrupt; while the broker blocks publishers (connection.blocked: a memory or disk alarm),
// Handle fails at once, as the sink's outage, rather than write what the broker would not read.
func (h *Handler) Handle(ctx context.Context, rec *handlers.Record[handlers.Row]) (err error) {
	key := h.routingKey
	if key == "" {
		key = rec.Key
	}
	if len(key) > maxRoutingKey {
		return handlers.Permanent(fmt.Errorf("rabbitmq: record %s: its key is %d bytes, more than the %d a routing "+
			"key may be", rec.ID, len(key), maxRoutingKey))
	}
	destination := h.exchange
	if destination == "" {
		destination = "amq.default" // the name the semantic conventions give the default exchange
	}
	ctx, span := tracecontext.Start(ctx, tracerName, "publish "+destination, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "publish"),
			attribute.String("messaging.destination.name", destination),
			attribute.String("messaging.rabbitmq.destination.routing_key", key),
			attribute.String("messaging.message.id", messageID(rec)))
	}
	defer func() { tracecontext.End(span, err) }()
	msg, err := h.message(rec)
	if err != nil {
		return err
	}
	tracecontext.Inject(ctx, tableCarrier(msg.Headers)) // traceparent and tracestate
	if h.envelope != nil {
		if err := h.cloudEvent(ctx, rec, &msg); err != nil {
			return err
		}
	}
	s, err := h.session(ctx)
	if err != nil {
		return err
	}
	p, err := s.publish(h.exchange, key, msg)
	if err != nil {
		return h.failure(rec, key, err, len(msg.Body))
	}
	var o outcome
	select {
	case o = <-p.done:
	case <-ctx.Done():
		select {
		case o = <-p.done: // settled as ctx ended: the answer counts
		default:
			return fmt.Errorf("rabbitmq: record %s to %s: no confirm yet: %w", rec.ID, h.exchangeName(), ctx.Err())
		}
	}
	switch {
	case o.err != nil:
		return h.failure(rec, key, o.err, len(msg.Body))
	case !o.ack:
		return fmt.Errorf("rabbitmq: record %s to %s: the broker refused it (basic.nack: a queue could not take it)",
			rec.ID, h.exchangeName())
	case o.returned != nil:
		return h.returned(rec, key, o.returned)
	}
	h.routed.Store(true)
	return nil
}

// returned describes a record the broker returned: no queue is bound for its routing key. It is the
// sink's refusal when every record meets it (a fixed routing key), or while the exchange has routed none
// of the handler's records; otherwise the record's.
func (h *Handler) returned(rec *handlers.Record[handlers.Row], key string, r *amqp.Return) error {
	err := fmt.Errorf("rabbitmq: record %s to %s with routing key %q was returned unroutable (%d %s): no queue is "+
		"bound for it", rec.ID, h.exchangeName(), key, r.ReplyCode, r.ReplyText)
	if h.routingKey != "" || !h.routed.Load() {
		return handlers.Unavailable(err, fmt.Sprintf("the bindings of %s: bind a queue for routing key %q", h.exchangeName(), key))
	}
	return handlers.Permanent(err)
}

// sizeRefusal is the reason RabbitMQ closes a channel with for a message over its max_message_size.
var sizeRefusal = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// failure describes a publish that failed with err (a dial error, or the close of the channel or the
// connection it went out on), marking as the sink's outage what every record would meet, and as
// permanent what the broker will never accept of this record.
func (h *Handler) failure(rec *handlers.Record[handlers.Row], key string, err error, size int) error {
	err = fmt.Errorf("rabbitmq: publish record %s to %s with routing key %q: %w", rec.ID, h.exchangeName(), key, err)
	if errors.Is(err, errBlocked) {
		return handlers.Unavailable(err, "the broker's memory and disk alarms (rabbitmq-diagnostics alarms)")
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.Code {
	case amqp.NotFound:
		return handlers.Unavailable(err, fmt.Sprintf("the exchange %q: declare it, or correct the name", h.exchange))
	case amqp.AccessRefused:
		return handlers.Unavailable(err, fmt.Sprintf("the user's rights: write on %s", h.exchangeName()))
	case amqp.PreconditionFailed:
		if m := sizeRefusal.FindStringSubmatch(ae.Reason); m != nil {
			if max, _ := strconv.Atoi(m[2]); max > 0 && size > max {
				return handlers.Permanent(fmt.Errorf("%w; the record's body is %d bytes, more than the broker's "+
					"max_message_size", err, size))
			}
			// Another record's size closed the channel this one went out on.
			return fmt.Errorf("%w (another record's)", err)
		}
	}
	return err
}

// unavailable marks a failure to connect or to open a channel as the sink's.
func (h *Handler) unavailable(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
		return handlers.Unavailable(err, "the credentials in the URL and the user's access to the virtual host")
	}
	return handlers.Unavailable(err, "the URL: that the broker runs there and accepts connections")
}

// messageID is the message_id of rec's message: the process and the record id, "process:id", the same
// for every delivery of the record, so that a consumer can drop the copies of a redelivery.
func messageID[T any](rec *handlers.Record[T]) string { return rec.Process + ":" + rec.ID }

// message builds the message for rec.
func (h *Handler) message(rec *handlers.Record[handlers.Row]) (amqp.Publishing, error) {
	body, err := rec.Value.Payload(h.payloadColumn)
	if err != nil {
		return amqp.Publishing{}, handlers.Permanent(fmt.Errorf("rabbitmq: encode record %s: %w", rec.ID, err))
	}
	headers := amqp.Table{
		handlers.HeaderID:        rec.ID,
		handlers.HeaderProcess:   rec.Process,
		handlers.HeaderCreatedAt: rec.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	msg := amqp.Publishing{
		Headers:      headers,
		DeliveryMode: amqp.Persistent,
		MessageId:    messageID(rec),
		Timestamp:    rec.CreatedAt,
		AppId:        appID,
		Body:         body,
	}
	if typ, ok := rec.Value.Text(h.typeColumns...); ok {
		headers[handlers.HeaderEventType] = typ
		msg.Type = typ
	}
	return msg, nil
}

// tracerName is the instrumentation scope of the publishes' spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/rabbitmq"

// tableCarrier writes a trace context into a message's headers.
type tableCarrier amqp.Table

func (c tableCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

func (c tableCarrier) Set(key, value string) { c[key] = value }

func (c tableCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// session returns the open session, connecting when there is none.
func (h *Handler) session(ctx context.Context) (*session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sess != nil && !h.sess.isClosed() {
		return h.sess, nil
	}
	h.sess = nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ac := h.amqpConfig
	if !h.ownDial {
		ac.Dial = func(network, addr string) (net.Conn, error) { return dial(ctx, network, addr) }
	}
	conn, err := amqp.DialConfig(h.url, ac)
	if err != nil {
		return nil, h.unavailable(fmt.Errorf("rabbitmq: connect to %s: %w", h.where, err))
	}
	s, err := openSession(conn)
	if err != nil {
		_ = conn.Close()
		return nil, h.unavailable(fmt.Errorf("rabbitmq: open a confirming channel on %s: %w", h.where, err))
	}
	h.sess = s
	return s, nil
}

// dialTimeout bounds connecting and the AMQP handshake, within the ctx of the record that connects.
const dialTimeout = 10 * time.Second

// dial connects for the client, with a deadline on the handshake that the client clears once the
// connection is open.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(dialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := c.SetDeadline(deadline); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// session is a connection and its one channel in confirm mode, on which every record is published, with
// the publishes awaiting the broker's confirm.
type session struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	pubMu sync.Mutex // held from taking a delivery tag to sending the publish

	mu       sync.Mutex
	pending  map[uint64]*pending       // by delivery tag
	returned map[string][]*amqp.Return // by message id, returned and awaiting their confirm
	err      error                     // why the session ended; nil while it is open
	blocked  string                    // the broker's reason while it blocks publishers (connection.blocked)
}

// pending is a publish awaiting its confirm.
type pending struct {
	messageID string
	done      chan outcome // buffered: one outcome
}

// outcome is how the broker settled a publish.
type outcome struct {
	ack      bool
	returned *amqp.Return // the message came back unroutable before its confirm
	err      error        // the channel or connection closed before the confirm
}

func openSession(conn *amqp.Connection) (*session, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	s := &session{conn: conn, ch: ch, pending: map[uint64]*pending{}, returned: map[string][]*amqp.Return{}}
	// Unbuffered: the client hands over a return and the confirms after it one at a time, in the order
	// the broker sent them, so a message's return is always seen before its confirm.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	go s.listen(returns, confirms, closes, blocks)
	return s, nil
}

// listen settles publishes as the broker answers, and all of them when the channel closes.
func (s *session) listen(returns <-chan amqp.Return, confirms <-chan amqp.Confirmation, closes <-chan *amqp.Error,
	blocks <-chan amqp.Blocking) {
	for {
		select {
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			s.mu.Lock()
			s.blocked = ""
			if b.Active {
				s.blocked = b.Reason
				if s.blocked == "" {
					s.blocked = "no reason given"
				}
			}
			s.mu.Unlock()
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.mu.Lock()
			s.returned[r.MessageId] = append(s.returned[r.MessageId], &r)
			s.mu.Unlock()
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			s.mu.Lock()
			if p := s.pending[c.DeliveryTag]; p != nil {
				delete(s.pending, c.DeliveryTag)
				o := outcome{ack: c.Ack}
				if rs := s.returned[p.messageID]; len(rs) > 0 {
					o.returned = rs[0]
					if s.returned[p.messageID] = rs[1:]; len(rs) == 1 {
						delete(s.returned, p.messageID)
					}
				}
				p.done <- o
			}
			s.mu.Unlock()
		case e, ok := <-closes:
			var err error = amqp.ErrClosed
			if ok && e != nil {
				err = e
			}
			s.mu.Lock()
			s.err = err
			for tag, p := range s.pending {
				p.done <- outcome{err: err}
				delete(s.pending, tag)
			}
			s.mu.Unlock()
			_ = s.conn.Close()
			return
		}
	}
}

func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// errBlocked is the failure of a publish while the broker blocks publishers.
var errBlocked = errors.New("the broker blocks publishers")

// publish sends msg and returns the publish awaiting its confirm. It fails at once while the broker blocks
// publishers (a memory or disk alarm): the publish would wait, unread, however long the alarm lasts.
func (s *session) publish(exchange, key string, msg amqp.Publishing) (*pending, error) {
	p := &pending{messageID: msg.MessageId, done: make(chan outcome, 1)}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	// Not under s.mu: the client holds the lock this takes while it hands listen a confirm, and listen
	// takes s.mu to settle it.
	tag := s.ch.GetNextPublishSeqNo()
	s.mu.Lock()
	switch {
	case s.err != nil:
		s.mu.Unlock()
		return nil, s.err
	case s.blocked != "":
		reason := s.blocked
		s.mu.Unlock()
		return nil, fmt.Errorf("%w (connection.blocked: %s)", errBlocked, reason)
	}
	s.pending[tag] = p // before the publish: its confirm may come before Publish returns
	s.mu.Unlock()
	if _, err := s.ch.PublishWithDeferredConfirm(exchange, key, true, false, msg); err != nil {
		s.mu.Lock()
		delete(s.pending, tag)
		s.mu.Unlock()
		return nil, err
	}
	return p, nil
}
