package redisstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/internal/ceformat"
	"github.com/inorder-dev/inorder/internal/tracecontext"
)

// Fields of every stream entry (FieldKey only when the record has a key, FieldEventType only when it has
// a type, FieldData only when the payload is not NULL).
const (
	// FieldID carries the record's id column as text. With FieldProcess it identifies a record across
	// redeliveries, so consumers can drop duplicates.
	FieldID = "id"
	// FieldProcess carries the name of the process that produced the record.
	FieldProcess = "process"
	// FieldCreatedAt carries the record's created_at column in UTC as time.RFC3339Nano.
	FieldCreatedAt = "created_at"
	// FieldKey carries the record's key (the process's key column).
	FieldKey = "key"
	// FieldEventType carries the value of the record's type column (Config.TypeColumn).
	FieldEventType = "event_type"
	// FieldData carries the payload: the payload column's value, or the whole row as JSON.
	FieldData = "data"
	// FieldContentType says what the data field holds when it is not the payload as it is:
	// application/cloudevents+json for a CloudEvent (Config.Envelope).
	FieldContentType = "content_type"
)

// Config configures a Handler. Client and Stream are required; every other field has a documented
// default.
type Config struct {
	// Client runs the XADD commands. The caller creates it (redis.NewClient, or a cluster or failover
	// client) and closes it after the processor has stopped. The handler sends one pipeline at a time, so
	// it needs no more than a connection or two of the client's pool. Required.
	Client redis.Cmdable

	// Stream is the stream entries are added to. With handlers.KeyPlaceholder ("{key}") in it, each record goes
	// to the stream named by the template with the record's key in place of the placeholder
	// ("orders:{key}" puts the records of key 42 in "orders:42"); a record without a key goes to the
	// template with the placeholder empty. Without it every record goes to that one stream, with its key
	// in the key field. Required.
	Stream string

	// MaxLen, when positive, trims each stream to about that many entries as entries are added (XADD
	// MAXLEN ~ n): Redis removes whole nodes of old entries only, so a stream may hold somewhat more.
	// Zero keeps every entry.
	MaxLen int64

	// PayloadColumn names the column whose value is the entry's data field: json and jsonb values and strings
	// as their bytes, bytea as is, and other values as their JSON encoding; NULL leaves the field out. A
	// record without such a column is sent whole, as one JSON object with its columns in order;
	// handlers.WholeRecord ("-") sends every record that way. Empty means handlers.DefaultPayloadColumn
	// ("payload"), as the Kafka and Pub/Sub sinks do.
	PayloadColumn string
	// TypeColumn names the column whose value is sent in the event_type field. Empty means the type
	// column, or the event_type column when the record has no type column, as the Kafka sink does.
	TypeColumn string

	// Envelope, when set, makes the data field each record's CloudEvent in the JSON event format, with a
	// content_type field saying so (application/cloudevents+json). CloudEvents has no Redis binding, so
	// the envelope must be in the structured mode, the one a stream entry can carry whole, as the NATS
	// binding does. Nil sends the payload as it is.
	Envelope *cloudevent.Envelope
}

// Handler adds each record to a Redis stream with XADD and returns once Redis answered with the entry's
// id. It implements handlers.Handler for handlers.Row and is safe for concurrent use: with
// processor.Config.MaxInFlight above 1, the processor calls it for records of different keys at once,
// one record per key at a time, and the XADDs that arrive while a pipeline is on the wire go together in
// the next one. It holds nothing of its own to release (no goroutine outlives a flush); the caller
// closes the client.
type Handler struct {
	client redis.Cmdable
	// prefix and suffix surround the key in a per-key stream's name; perKey is false for one stream,
	// named by prefix.
	prefix, suffix string
	perKey         bool
	maxLen         int64
	// payloadColumn is Config.PayloadColumn with its default, "" for the whole record.
	payloadColumn string
	// typeColumns are the columns tried in turn for the event_type field.
	typeColumns []string
	envelope    *cloudevent.Envelope // nil: the payload as it is
	// reads are the columns named in the configuration, which every record must have.
	reads []string

	// mu guards queue and flushing: the XADDs waiting for the next pipeline, and whether a flush is
	// under way (it takes what queued while it ran before it ends).
	mu       sync.Mutex
	queue    []*xadd
	flushing bool
}

// xadd is one record's command on its way through a pipeline.
type xadd struct {
	ctx  context.Context
	args *redis.XAddArgs
	err  error
	done chan struct{} // closed once err is set
}

var _ handlers.Handler[handlers.Row] = (*Handler)(nil)

// New checks cfg and returns a handler. It makes no request: see Check.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisstream: Config.Client is required")
	}
	if cfg.Stream == "" {
		return nil, errors.New("redisstream: Config.Stream is required")
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("redisstream: Config.MaxLen must not be negative, got %d", cfg.MaxLen)
	}
	if cfg.Envelope != nil && cfg.Envelope.Mode() != cloudevent.Structured {
		return nil, fmt.Errorf("redisstream: Config.Envelope is in %s mode, but CloudEvents has no Redis "+
			"binding: a stream entry carries the structured mode only", cfg.Envelope.Mode())
	}
	h := &Handler{client: cfg.Client, maxLen: cfg.MaxLen, payloadColumn: cfg.PayloadColumn,
		typeColumns: []string{"type", "event_type"}, envelope: cfg.Envelope}
	switch n := strings.Count(cfg.Stream, handlers.KeyPlaceholder); n {
	case 0:
		h.prefix = cfg.Stream
	case 1:
		h.perKey = true
		h.prefix, h.suffix, _ = strings.Cut(cfg.Stream, handlers.KeyPlaceholder)
	default:
		return nil, fmt.Errorf("redisstream: Config.Stream %q has %s %d times: at most once", cfg.Stream, handlers.KeyPlaceholder, n)
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

// StreamOf returns the stream the records of key go to.
func (h *Handler) StreamOf(key string) string {
	if !h.perKey {
		return h.prefix
	}
	return h.prefix + key + h.suffix
}

// Check asks the server whether records can be added: it pings it, and with one stream for every record
// checks that the stream's key is a stream or does not exist yet (XADD creates it). Its errors are
// UnavailableErrors that say what to look at, for a start-up check.
func (h *Handler) Check(ctx context.Context) error {
	if err := h.client.Ping(ctx).Err(); err != nil {
		return classify(fmt.Errorf("redisstream: ping: %w", err), "", false)
	}
	if h.perKey {
		return nil
	}
	typ, err := h.client.Type(ctx, h.prefix).Result()
	if err != nil {
		return classify(fmt.Errorf("redisstream: TYPE %s: %w", h.prefix, err), h.prefix, true)
	}
	if typ != "none" && typ != "stream" {
		return handlers.Unavailable(fmt.Errorf("redisstream: key %q holds a %s, not a stream", h.prefix, typ),
			fmt.Sprintf("the stream %q: delete the key, or name another stream", h.prefix))
	}
	return nil
}

// Handle adds rec to its stream and waits until Redis answered, the command failed, or ctx is done,
// whichever comes first. The entry's id is Redis's (the server's clock and a sequence): see the
// package documentation for redeliveries.
func (h *Handler) Handle(ctx context.Context, rec *handlers.Record[handlers.Row]) (err error) {
	stream := h.StreamOf(rec.Key)
	ctx, span := tracecontext.Start(ctx, tracerName, "send "+stream, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "redis"),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", stream))
	}
	defer func() { tracecontext.End(span, err) }()
	values, err := h.values(ctx, rec)
	if err != nil {
		return err
	}
	args := &redis.XAddArgs{Stream: stream, Values: values}
	if h.maxLen > 0 {
		args.MaxLen, args.Approx = h.maxLen, true
	}
	x := &xadd{ctx: ctx, args: args, done: make(chan struct{})}
	h.send(x)
	select {
	case <-x.done:
	case <-ctx.Done():
		select {
		case <-x.done: // settled as ctx ended: the answer counts
		default:
			return fmt.Errorf("redisstream: XADD record %s to stream %q: no answer yet: %w", rec.ID, stream, ctx.Err())
		}
	}
	if x.err != nil {
		return classify(fmt.Errorf("redisstream: XADD record %s to stream %q: %w", rec.ID, stream, x.err), stream, !h.perKey)
	}
	return nil
}

// send queues x for the next pipeline. When no flush is under way, the caller runs one at once with what
// is queued (x, at least), and a goroutine then takes over what queued meanwhile, until nothing is left:
// the XADDs of a window that arrive while a pipeline is on the wire go together in the next one, one
// write and one read for all of them. Only one pipeline is in flight at a time, so Redis runs the
// commands in the order they were queued; records of one key are queued one after another's answer.
func (h *Handler) send(x *xadd) {
	h.mu.Lock()
	h.queue = append(h.queue, x)
	lead := !h.flushing
	h.flushing = true
	h.mu.Unlock()
	if lead && h.flushNext() {
		go func() {
			for h.flushNext() {
			}
		}()
	}
}

// flushNext runs the queued XADDs in one pipeline and reports whether more queued meanwhile. When none did,
// the flush is over.
func (h *Handler) flushNext() bool {
	h.mu.Lock()
	queued := h.queue
	h.queue = nil
	if len(queued) == 0 {
		h.flushing = false
		h.mu.Unlock()
		return false
	}
	h.mu.Unlock()
	// A command whose caller stopped waiting before it was sent is not sent: it is not added, and its
	// redelivery adds no copy.
	batch := queued[:0]
	for _, x := range queued {
		if err := x.ctx.Err(); err != nil {
			x.err = err
			close(x.done)
			continue
		}
		batch = append(batch, x)
	}
	if len(batch) == 0 {
		return h.more()
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	var cmds []*redis.StringCmd
	if len(batch) == 1 {
		cmds = []*redis.StringCmd{h.client.XAdd(ctx, batch[0].args)}
	} else {
		pipe := h.client.Pipeline()
		cmds = make([]*redis.StringCmd, len(batch))
		for i, x := range batch {
			cmds[i] = pipe.XAdd(ctx, x.args)
		}
		_, _ = pipe.Exec(ctx) // each command has its own error
	}
	for i, x := range batch {
		x.err = cmds[i].Err()
		close(x.done)
	}
	return h.more()
}

// more reports whether XADDs queued during a flush, and ends the flush when none did.
func (h *Handler) more() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	more := len(h.queue) > 0
	if !more {
		h.flushing = false
	}
	return more
}

// batchContext is the context of a pipeline: no caller's cancellation (the others' commands are in it
// too), and the latest of their deadlines, none when one of them has none. A caller whose context ends
// first stops waiting for its answer.
func batchContext(batch []*xadd) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, x := range batch {
		d, ok := x.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// values are the entry's fields and values, in order.
func (h *Handler) values(ctx context.Context, rec *handlers.Record[handlers.Row]) ([]string, error) {
	v := make([]string, 0, 16)
	v = append(v, FieldID, rec.ID, FieldProcess, rec.Process,
		FieldCreatedAt, rec.CreatedAt.UTC().Format(time.RFC3339Nano))
	if rec.Key != "" {
		v = append(v, FieldKey, rec.Key)
	}
	typ, hasType := rec.Value.Text(h.typeColumns...)
	if hasType {
		v = append(v, FieldEventType, typ)
	}
	data, err := rec.Value.Payload(h.payloadColumn)
	if err != nil {
		return nil, handlers.Permanent(fmt.Errorf("redisstream: encode record %s: %w", rec.ID, err))
	}
	if h.envelope != nil {
		if data, err = json.Marshal(ceformat.Of(ctx, (*ceformat.Envelope)(h.envelope), rec, typ, data)); err != nil {
			return nil, handlers.Permanent(fmt.Errorf("redisstream: encode record %s as a CloudEvent: %w", rec.ID, err))
		}
		v = append(v, FieldContentType, ceformat.StructuredContentType)
	}
	if data != nil {
		v = append(v, FieldData, string(data))
	}
	c := &fieldCarrier{v: v}
	tracecontext.Inject(ctx, c) // traceparent and tracestate
	return c.v, nil
}

// classify marks what Redis refuses every record as the sink's outage (handlers.Unavailable): no or wrong
// credentials, missing rights, a replica (READONLY), a server loading its data, out of memory or not
// reachable, and with one stream for every record (fixed), that stream's key holding another type.
// With a stream per key, a key of another type is the record's: its stream is wrong (handlers.Permanent).
// Every other failure is returned as it is, for the processor to retry.
func classify(err error, stream string, fixed bool) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case redis.IsAuthError(err), redis.HasErrorPrefix(err, "Protocol error: unauthenticated"):
		// Redis closes an unauthenticated connection on a command of more than ten arguments, such as an
		// XADD, with a protocol error rather than NOAUTH.
		return handlers.Unavailable(err, "the credentials (the user and password in --redis-url)")
	case redis.IsPermissionError(err):
		return handlers.Unavailable(err, "the user's rights (its ACL must allow XADD on the stream's keys)")
	case redis.IsReadOnlyError(err):
		return handlers.Unavailable(err, "the address: it is a read-only replica, not the primary")
	case redis.IsLoadingError(err), redis.IsMasterDownError(err), redis.IsClusterDownError(err),
		redis.IsOOMError(err), redis.IsMaxClientsError(err):
		return handlers.Unavailable(err, "the Redis server's state (its log)")
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		if fixed {
			return handlers.Unavailable(fmt.Errorf("%w; the key is not a stream", err),
				fmt.Sprintf("the stream %q: delete the key, or name another stream", stream))
		}
		return handlers.Permanent(fmt.Errorf("%w; the record's stream key holds another type", err))
	case connectionError(err):
		return handlers.Unavailable(err, "the address in --redis-url and whether Redis runs there")
	}
	return err
}

// connectionError reports whether err is a failure to reach the server rather than its answer.
func connectionError(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	var nerr net.Error
	var operr *net.OpError
	return errors.As(err, &operr) || errors.As(err, &nerr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout)
}

// tracerName is the instrumentation scope of the XADDs' spans.
const tracerName = "github.com/inorder-dev/inorder/handlers/redisstream"

// fieldCarrier writes a trace context into an entry's fields.
type fieldCarrier struct{ v []string }

func (c *fieldCarrier) Get(key string) string {
	for i := 0; i+1 < len(c.v); i += 2 {
		if c.v[i] == key {
			return c.v[i+1]
		}
	}
	return ""
}

func (c *fieldCarrier) Set(key, value string) {
	for i := 0; i+1 < len(c.v); i += 2 {
		if c.v[i] == key {
			c.v[i+1] = value
			return
		}
	}
	c.v = append(c.v, key, value)
}

func (c *fieldCarrier) Keys() []string {
	keys := make([]string, 0, len(c.v)/2)
	for i := 0; i+1 < len(c.v); i += 2 {
		keys = append(keys, c.v[i])
	}
	return keys
}
