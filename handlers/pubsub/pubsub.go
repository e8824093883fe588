package pubsub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/setting"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// typePlaceholder is replaced by the record's event type in Config.TopicTemplate.
const typePlaceholder = "{type}"

// Config configures a Handler. Client and one of Topic, TopicTemplate and TopicFunc are required; every
// other field has a documented default.
type Config struct {
	// Client publishes the messages. The caller creates it (pubsub.NewClient honours PUBSUB_EMULATOR_HOST)
	// and closes it after closing the handler. Required.
	Client *pubsub.Client

	// Topic is the topic records are published to: a topic ID in the client's project ("bookings") or a
	// full name ("projects/my-project/topics/bookings"). It is required unless TopicTemplate or TopicFunc
	// is set; with TopicTemplate it is where records without an event type go.
	Topic string
	// TopicTemplate, when set, chooses the topic from the record's event type (its type column, or its
	// event_type column when it has no type column): "{type}" in the template is replaced by the type, so
	// "events-{type}" sends a record of type "booking.created" to the topic "events-booking.created".
	// Records without an event type go to Topic, and halt the stream with a permanent error when Topic is
	// empty. Empty means every record goes to Topic.
	TopicTemplate string
	// TopicFunc, when set, chooses each record's topic (an ID or a full name) and takes precedence over
	// Topic and TopicTemplate. An error it returns is the record's failure; wrap it with
	// handlers.Permanent when retrying soon cannot help. Nil means Topic and TopicTemplate decide.
	TopicFunc func(rec *handlers.Record[handlers.Row]) (string, error)

	// MaxInFlight is how many records may be published and not yet acknowledged at once. Messages that
	// share an ordering key stay in order whatever its value; a larger value hides the round trip to
	// Pub/Sub. Zero means 100; 1 publishes one record at a time.
	MaxInFlight int
	// PayloadColumn names the column whose value is the message data: json and jsonb values and strings as
	// their bytes, bytea as is, NULL as empty data and other values as their JSON encoding. A record without
	// such a column is published whole, as one JSON object with its columns in order; handlers.WholeRecord
	// ("-") publishes every record that way. Empty means handlers.DefaultPayloadColumn ("payload").
	PayloadColumn string
	// MaxMessageBytes bounds a message's size, counted as its data plus its attribute names and values
	// plus its ordering key. A larger record halts the stream with a permanent error naming the record and
	// its size, since Pub/Sub would refuse it. Zero means 10 MB less 100 kB, Pub/Sub's
	// request limit less headroom for the request's own framing.
	MaxMessageBytes int
	// PublishSettings tunes batching, flow control and the publish timeout of every publisher the handler
	// creates. Hedging cannot be combined with ordering keys and is refused. Nil means
	// pubsub.DefaultPublishSettings.
	PublishSettings *pubsub.PublishSettings
	// Envelope, when set, sends each record as a CloudEvent in the envelope's content mode, as Google's
	// Pub/Sub binding for CloudEvents says: the payload as the data, ce- attributes and content-type in
	// binary mode, the JSON event format as the data in structured mode; the type from the type column
	// (or event_type). Nil means the handler's own format.
	Envelope *cloudevent.Envelope
}

// Handler publishes records to Pub/Sub with the record's key as the ordering key, and lets the position
// move past a record only once Pub/Sub acknowledged it. It implements handlers.Handler and
// handlers.AsyncHandler for handlers.Row and is safe for concurrent use. A handler serves one process: it
// refuses records of a second one, since when it resumes a paused ordering key depends on what its one
// processor does after a failure. Close it when done.
type Handler struct {
	client          *pubsub.Client
	topic           string
	topicTemplate   string
	topicFunc       func(rec *handlers.Record[handlers.Row]) (string, error)
	maxInFlight     int
	payloadColumn   string   // Config.PayloadColumn with its default, "" for the whole record
	reads           []string // the payload column, when the configuration names one
	maxMessageBytes int
	settings        *pubsub.PublishSettings
	envelope        *cloudevent.Envelope

	mu      sync.Mutex
	closed  bool
	process string                // the process served, from the first record
	pubs    map[string]*publisher // by full topic name
	// stopped is set when an error went back to the processor, which then sends nothing more until it
	// delivers again from its position: paused keys may be resumed. The next Send clears it.
	stopped bool
}

var (
	_ handlers.Handler[handlers.Row]      = (*Handler)(nil)
	_ handlers.AsyncHandler[handlers.Row] = (*Handler)(nil)
)

// publisher is the one Pub/Sub publisher of a topic, with the state of its ordering keys.
type publisher struct {
	name string
	p    *pubsub.Publisher
	// keys holds the ordering keys with publishes not yet settled or a pause not yet lifted. Guarded by
	// Handler.mu.
	keys map[string]*keyState
}

// keyState follows one ordering key of one publisher.
type keyState struct {
	// pending are the results of publishes on the key that were not seen settled yet, oldest first.
	pending []*pubsub.PublishResult
	// paused is set when a publish on the key was seen failing: the client then refuses every later
	// message on the key until ResumePublish.
	paused bool
}

// New checks cfg and returns a handler. It makes no request: publishers are created on first use.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, errors.New("pubsub: Config.Client is required")
	}
	if cfg.Topic == "" && cfg.TopicTemplate == "" && cfg.TopicFunc == nil {
		return nil, errors.New("pubsub: one of Config.Topic, Config.TopicTemplate and Config.TopicFunc is required")
	}
	if cfg.Topic != "" {
		if _, err := topicName(cfg.Client.Project(), cfg.Topic); err != nil {
			return nil, fmt.Errorf("pubsub: Config.Topic: %w", err)
		}
	}
	if cfg.TopicTemplate != "" && !strings.Contains(cfg.TopicTemplate, typePlaceholder) {
		return nil, fmt.Errorf("pubsub: Config.TopicTemplate %q does not contain %s", cfg.TopicTemplate, typePlaceholder)
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("pubsub: Config.MaxInFlight %d is negative", cfg.MaxInFlight)
	}
	if cfg.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("pubsub: Config.MaxMessageBytes %d is negative", cfg.MaxMessageBytes)
	}
	if cfg.PublishSettings != nil && cfg.PublishSettings.HedgingSettings != nil {
		return nil, errors.New("pubsub: Config.PublishSettings.HedgingSettings is set, but hedging cannot be combined with ordering keys")
	}
	h := &Handler{
		client:          cfg.Client,
		topic:           cfg.Topic,
		topicTemplate:   cfg.TopicTemplate,
		topicFunc:       cfg.TopicFunc,
		maxInFlight:     cfg.MaxInFlight,
		payloadColumn:   cfg.PayloadColumn,
		maxMessageBytes: cfg.MaxMessageBytes,
		pubs:            map[string]*publisher{},
		envelope:        cfg.Envelope,
	}
	if cfg.PublishSettings != nil {
		s := *cfg.PublishSettings
		h.settings = &s
	}
	if h.maxInFlight == 0 {
		h.maxInFlight = setting.DefaultPubSubMaxInFlight
	}
	switch h.payloadColumn {
	case "":
		h.payloadColumn = handlers.DefaultPayloadColumn
	case handlers.WholeRecord:
		h.payloadColumn = "" // handlers.Row.Payload's whole row
	default:
		h.reads = []string{h.payloadColumn}
	}
	if h.maxMessageBytes == 0 {
		h.maxMessageBytes = setting.DefaultPubSubMaxMessageBytes
	}
	return h, nil
}

// MaxInFlight implements handlers.AsyncHandler.
func (h *Handler) MaxInFlight() int { return h.maxInFlight }

// Handle publishes rec and waits for Pub/Sub to acknowledge it.
func (h *Handler) Handle(ctx context.Context, rec *handlers.Record[handlers.Row]) error {
	res, err := h.Send(ctx, rec)
	if err != nil {
		return err
	}
	return res.Wait(ctx)
}

// Send publishes rec and returns at once; the result's Wait reports Pub/Sub's answer. A record that
// cannot become a message (no topic, too large, not encodable) fails here with a permanent error.
//
// The first Send after an error went back to the processor starts its delivery again from the position.
// It first waits (bounded by ctx) until the publishes on paused ordering keys have settled, and resumes
// those keys, so that the records delivered again are published after everything sent before them was
// refused.
func (h *Handler) Send(ctx context.Context, rec *handlers.Record[handlers.Row]) (handlers.Result, error) {
	h.mu.Lock()
	if h.process == "" {
		h.process = rec.Process
	}
	process := h.process
	h.mu.Unlock()
	if rec.Process != process {
		return nil, handlers.Permanent(fmt.Errorf("pubsub: record %s of process %q: this handler serves process "+
			"%q; give each process a handler of its own", rec.ID, rec.Process, process))
	}
	res, err := h.send(ctx, rec)
	if err != nil {
		// The processor sends nothing more until it delivers again from its position.
		h.mu.Lock()
		h.stopped = true
		h.mu.Unlock()
	}
	return res, err
}

func (h *Handler) send(ctx context.Context, rec *handlers.Record[handlers.Row]) (_ handlers.Result, err error) {
	topic, err := h.topicOf(rec)
	if err != nil {
		return nil, err
	}
	ctx, span := tracecontext.Start(ctx, tracerName, "send "+topic, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "gcp_pubsub"),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", topic), attribute.String("messaging.gcp_pubsub.message.ordering_key", rec.Key))
	}
	defer func() {
		if err != nil {
			tracecontext.End(span, err)
		}
	}()
	msg, err := h.message(ctx, rec)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("pubsub: record %s: handler is closed", rec.ID)
	}
	if h.stopped {
		if err := h.resumePaused(ctx); err != nil {
			return nil, fmt.Errorf("pubsub: record %s: earlier publishes on a paused ordering key have not settled "+
				"yet: %w", rec.ID, err)
		}
		h.stopped = false
	}
	pub := h.publisher(topic)
	r := pub.p.Publish(ctx, msg)
	if msg.OrderingKey != "" {
		ks := pub.keys[msg.OrderingKey]
		if ks == nil {
			ks = &keyState{}
			pub.keys[msg.OrderingKey] = ks
		}
		ks.pending = append(ks.pending, r)
	}
	return &result{h: h, pub: pub, key: msg.OrderingKey, id: rec.ID, res: r, span: span}, nil
}

// result is the outcome of one publish.
type result struct {
	h   *Handler
	pub *publisher
	key string
	id  string
	res *pubsub.PublishResult
	// span is the publish's span, ended by the first Wait.
	span trace.Span
}

// Wait blocks until Pub/Sub acknowledged the message or the publish failed. When it failed, the processor
// sends nothing more until it delivers again from its position; Wait then waits (bounded by ctx) for the
// other publishes on the ordering key to settle and resumes the key before it returns the error, so that
// the record can be published again.
func (r *result) Wait(ctx context.Context) (werr error) {
	id, err := r.res.Get(ctx)
	defer func() {
		// Ended by the first Wait, settled or not: a Wait cut off by its context is the last one the
		// processor makes of this publish.
		if r.span != nil {
			if werr == nil {
				r.span.SetAttributes(attribute.String("messaging.message.id", id))
			}
			tracecontext.End(r.span, werr)
			r.span = nil
		}
	}()
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.stopped = true
	}
	if !settled(r.res) {
		// ctx ended first: the publish is still under way and may yet succeed or pause the key; the next
		// Send notices either way before it publishes.
		return fmt.Errorf("pubsub: record %s on %s: no acknowledgement yet: %w", r.id, r.pub.name, err)
	}
	if r.key != "" {
		h.reconcile(r.pub, r.key)
	}
	if err == nil {
		return nil
	}
	if r.key != "" {
		// Best effort: if ctx ends before the key can be resumed, the next Send resumes it.
		_ = h.resumeKey(ctx, r.pub, r.key)
	}
	return r.failure(err)
}

// failure describes a failed publish, marking the failures retrying cannot fix as permanent.
func (r *result) failure(err error) error {
	var paused pubsub.ErrPublishingPaused
	if errors.As(err, &paused) {
		// The client's own text asks for ResumePublish, which the handler does by itself.
		return fmt.Errorf("pubsub: record %s on %s: not published because an earlier message with ordering "+
			"key %q failed", r.id, r.pub.name, paused.OrderingKey)
	}
	err = fmt.Errorf("pubsub: publish record %s to %s: %w", r.id, r.pub.name, err)
	if errors.Is(err, pubsub.ErrOversizedMessage) || status.Code(err) == codes.InvalidArgument {
		return handlers.Permanent(err)
	}
	// What every record meets: credentials, rights, and with one topic for every record, a topic that does
	// not exist. With a topic per record (a template, a TopicFunc) a missing topic is the record's.
	switch code := status.Code(err); {
	case code == codes.Unauthenticated:
		return handlers.Unavailable(err, "the client's credentials (GOOGLE_APPLICATION_CREDENTIALS, the service account)")
	case code == codes.PermissionDenied:
		return handlers.Unavailable(err, "the service account's rights on "+r.pub.name+" (roles/pubsub.publisher)")
	case code == codes.NotFound && r.h.fixedTopic():
		return handlers.Unavailable(err, "the topic "+r.pub.name+" (--pubsub-topic): create it, or correct the name")
	}
	return err
}

func settled(r *pubsub.PublishResult) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// reconcile drops the settled publishes of a key and notes a failure among them. It resumes a paused key
// once nothing is pending on it and the processor has stopped sending. The caller holds h.mu.
//
// Both conditions keep the order. The client pauses a key when a publish on it fails and refuses every
// later message on the key while it is paused, but the messages already queued behind the failed one are
// refused only as their turn comes: resuming while one of them is still queued would let it through,
// acknowledged ahead of the failed record. And until the processor has seen an error it goes on sending
// records after the failed one: resuming then would let those through. Once it has seen an error, it
// sends nothing until it delivers again from its position, which is before the failed record since that
// record was never acknowledged.
func (h *Handler) reconcile(pub *publisher, key string) {
	ks := pub.keys[key]
	if ks == nil {
		return
	}
	kept := ks.pending[:0]
	for _, r := range ks.pending {
		if !settled(r) {
			kept = append(kept, r)
			continue
		}
		if _, err := r.Get(context.Background()); err != nil {
			ks.paused = true
		}
	}
	clear(ks.pending[len(kept):])
	ks.pending = kept
	switch {
	case len(kept) > 0:
	case !ks.paused:
		delete(pub.keys, key)
	case h.stopped:
		pub.p.ResumePublish(key)
		delete(pub.keys, key)
	}
}

// resumeKey waits until every publish on a key has settled, and resumes the key if it is paused. The
// caller holds h.mu, which is released while waiting, and h.stopped is set.
func (h *Handler) resumeKey(ctx context.Context, pub *publisher, key string) error {
	for {
		h.reconcile(pub, key)
		ks := pub.keys[key]
		if ks == nil || len(ks.pending) == 0 {
			return nil
		}
		if err := h.await(ctx, ks.pending[0]); err != nil {
			return err
		}
	}
}

// resumePaused reconciles every ordering key, waits for the publishes on paused keys to settle and resumes
// those keys. The caller holds h.mu, which is released while waiting, and h.stopped is set.
func (h *Handler) resumePaused(ctx context.Context) error {
	for {
		var next *pubsub.PublishResult
		for _, pub := range h.pubs {
			for key := range pub.keys {
				h.reconcile(pub, key)
				if ks := pub.keys[key]; ks != nil && ks.paused && len(ks.pending) > 0 && next == nil {
					next = ks.pending[0]
				}
			}
		}
		if next == nil {
			return nil
		}
		if err := h.await(ctx, next); err != nil {
			return err
		}
	}
}

// await waits for r to settle with h.mu released.
func (h *Handler) await(ctx context.Context, r *pubsub.PublishResult) error {
	h.mu.Unlock()
	defer h.mu.Lock()
	select {
	case <-r.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes every publisher, waits for its messages to be sent or to fail, and stops it. Sends after
// Close fail. It does not close the client.
func (h *Handler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	pubs := make([]*publisher, 0, len(h.pubs))
	for _, p := range h.pubs {
		pubs = append(pubs, p)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Go(p.p.Stop)
	}
	wg.Wait()
	return nil
}

// publisher returns the topic's publisher, creating it with message ordering enabled on first use. The
// caller holds h.mu.
func (h *Handler) publisher(name string) *publisher {
	if p, ok := h.pubs[name]; ok {
		return p
	}
	p := h.client.Publisher(name)
	if h.settings != nil {
		p.PublishSettings = *h.settings
	}
	p.EnableMessageOrdering = true
	pub := &publisher{name: name, p: p, keys: map[string]*keyState{}}
	h.pubs[name] = pub
	return pub
}

// topicOf returns the full name of the topic rec goes to.
func (h *Handler) topicOf(rec *handlers.Record[handlers.Row]) (string, error) {
	var t string
	switch {
	case h.topicFunc != nil:
		var err error
		if t, err = h.topicFunc(rec); err != nil {
			return "", fmt.Errorf("pubsub: choose the topic of record %s: %w", rec.ID, err)
		}
		if t == "" {
			return "", handlers.Permanent(fmt.Errorf("pubsub: TopicFunc chose no topic for record %s", rec.ID))
		}
	case h.topicTemplate != "":
		if typ, ok := eventType(rec.Value); ok && typ != "" {
			t = strings.ReplaceAll(h.topicTemplate, typePlaceholder, typ)
		} else if h.topic != "" {
			t = h.topic
		} else {
			return "", handlers.Permanent(fmt.Errorf("pubsub: record %s has no type or event_type to fill the "+
				"topic template %q, and no default topic is set", rec.ID, h.topicTemplate))
		}
	default:
		t = h.topic
	}
	name, err := topicName(h.client.Project(), t)
	if err != nil {
		return "", handlers.Permanent(fmt.Errorf("pubsub: record %s: %w", rec.ID, err))
	}
	return name, nil
}

// topicIDPattern is what Pub/Sub accepts as a topic ID.
var topicIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$`)

// topicName turns a topic ID or full name into a checked full name.
func topicName(project, t string) (string, error) {
	id := t
	if strings.Contains(t, "/") {
		parts := strings.Split(t, "/")
		if len(parts) != 4 || parts[0] != "projects" || parts[1] == "" || parts[2] != "topics" {
			return "", fmt.Errorf("topic %q is neither a topic ID nor a full name projects/<project>/topics/<topic>", t)
		}
		project, id = parts[1], parts[3]
	}
	if !topicIDPattern.MatchString(id) || strings.HasPrefix(strings.ToLower(id), "goog") {
		return "", fmt.Errorf("topic ID %q is not valid: it must be 3 to 255 letters, digits and - _ . ~ + %%, "+
			"start with a letter and not with goog", id)
	}
	return "projects/" + project + "/topics/" + id, nil
}

// tracerName is the instrumentation scope of the publishes' spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/pubsub"

// eventType returns the record's type column, or its event_type column when it has no type column.
func eventType(row handlers.Row) (string, bool) { return row.Text("type", "event_type") }

// message builds the Pub/Sub message for rec.
func (h *Handler) message(ctx context.Context, rec *handlers.Record[handlers.Row]) (*pubsub.Message, error) {
	data, err := rec.Value.Payload(h.payloadColumn)
	if err != nil {
		return nil, handlers.Permanent(fmt.Errorf("pubsub: encode record %s: %w", rec.ID, err))
	}
	attrs := map[string]string{
		handlers.HeaderID:        rec.ID,
		handlers.HeaderProcess:   rec.Process,
		handlers.HeaderCreatedAt: rec.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	if typ, ok := eventType(rec.Value); ok {
		attrs[handlers.HeaderEventType] = typ
	}
	tracecontext.Inject(ctx, propagation.MapCarrier(attrs)) // traceparent and tracestate
	msg := &pubsub.Message{Data: data, Attributes: attrs, OrderingKey: rec.Key}
	if h.envelope != nil {
		if err := h.cloudEvent(ctx, rec, msg); err != nil {
			return nil, err
		}
	}
	if size := messageSize(msg); size > h.maxMessageBytes {
		return nil, handlers.Permanent(fmt.Errorf("pubsub: record %s is %d bytes as a message, more than the "+
			"limit of %d bytes: Pub/Sub would refuse it", rec.ID, size, h.maxMessageBytes))
	}
	return msg, nil
}

// messageSize is the size MaxMessageBytes bounds.
func messageSize(m *pubsub.Message) int {
	n := len(m.Data) + len(m.OrderingKey)
	for k, v := range m.Attributes {
		n += len(k) + len(v)
	}
	return n
}

// ReadsColumns implements handlers.ColumnReader: the payload column, when Config.PayloadColumn names one
// (not the default, which a record may lack: it is then published whole).
func (h *Handler) ReadsColumns() []string { return h.reads }

// fixedTopic reports whether every record goes to one topic (Config.Topic alone).
func (h *Handler) fixedTopic() bool { return h.topicTemplate == "" && h.topicFunc == nil }
