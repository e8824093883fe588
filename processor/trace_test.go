package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/traceparent"
)

// traced is a test's tracing: the application's provider, which traces its writes, and inorder's, whose
// spans a recorder keeps.
type traced struct {
	app      *sdktrace.TracerProvider
	recorder *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
}

func setupTracing(t *testing.T, b *bundle) *traced {
	t.Helper()
	b.db.Exec(t, `ALTER TABLE events ADD COLUMN traceparent text, ADD COLUMN tracestate text`)
	tr := &traced{app: sdktrace.NewTracerProvider(), recorder: tracetest.NewSpanRecorder()}
	tr.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.recorder))
	b.cfg.TracerProvider = tr.tp
	return tr
}

// write inserts n events of aggregate inside a span of the application's, as a request handler would:
// the trace context goes into the row in the transaction that writes it. It returns the span's context
// and the ids.
func (tr *traced) write(t *testing.T, b *bundle, aggregate string, n int) (trace.SpanContext, []int64) {
	t.Helper()
	ctx, span := tr.app.Tracer("app").Start(context.Background(), "POST /bookings",
		trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	parent, state := traceparent.FromContext(ctx)
	require.NotNil(t, parent)
	var ids []int64
	for i := range n {
		var id int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `INSERT INTO events (aggregate_id, seq, traceparent, tracestate)
			VALUES ($1, $2, $3, $4) RETURNING id`, aggregate, i, parent, state).Scan(&id))
		ids = append(ids, id)
	}
	return span.SpanContext(), ids
}

// deliveries returns the ended delivery spans of record id, in the order they ended.
func (tr *traced) deliveries(id int64) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.recorder.Ended() {
		if s.Name() == "deliver test_process" && attr(s, "messaging.message.id").AsString() == fmt.Sprint(id) {
			out = append(out, s)
		}
	}
	return out
}

func (tr *traced) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.recorder.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// spanCollector remembers the span context each record's handler call got.
type spanCollector struct {
	mu  sync.Mutex
	got map[int64]trace.SpanContext
}

func (c *spanCollector) Handle(ctx context.Context, rec *handlers.Record[event]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[rec.Value.ID] = trace.SpanContextFromContext(ctx)
	return nil
}

func (c *spanCollector) of(id int64) (trace.SpanContext, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.got[id]
	return sc, ok
}

func TestTracingContinuesTheApplicationsTrace(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []int{1, 4} {
		t.Run(fmt.Sprintf("in flight %d", inFlight), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tr := setupTracing(t, b)
			h := &spanCollector{got: map[int64]trace.SpanContext{}}
			b.cfg.Handler, b.cfg.MaxInFlight = h, inFlight
			app, ids := tr.write(t, b, "a", 3)
			untraced := b.insert(t, 1)[0]

			stop := start(t, b.cfg)
			waitFor(t, "every record delivered", func() bool { _, ok := h.of(untraced); return ok })
			require.NoError(t, stop())

			for _, id := range ids {
				ds := tr.deliveries(id)
				require.Len(t, ds, 1, "record %d", id)
				d := ds[0]
				require.Equal(t, app.TraceID(), d.SpanContext().TraceID(), "record %d is delivered in the application's trace", id)
				require.Equal(t, app.SpanID(), d.Parent().SpanID(), "a child of the span that wrote it")
				require.True(t, d.Parent().IsRemote())
				require.Equal(t, trace.SpanKindConsumer, d.SpanKind())
				require.Equal(t, app.SpanID(), d.Links()[0].SpanContext.SpanID(), "linked to its creation context")
				require.Equal(t, "test_process", attr(d, "inorder.process").AsString())
				require.Equal(t, "a", attr(d, "inorder.record.key").AsString())
				require.Equal(t, int64(1), attr(d, "inorder.record.attempt").AsInt64())
				require.Equal(t, "public.events", attr(d, "messaging.destination.name").AsString())
				require.Equal(t, codes.Unset, d.Status().Code)
				got, _ := h.of(id)
				require.Equal(t, d.SpanContext(), got, "the handler's context carries the delivery span")
			}

			// A row written outside any span is delivered in the trace of its batch, which shows the
			// horizon, the read and the commit.
			ds := tr.deliveries(untraced)
			require.Len(t, ds, 1)
			batch := ds[0].Parent()
			require.NotEqual(t, app.TraceID(), batch.TraceID())
			var children []string
			for _, s := range tr.recorder.Ended() {
				if s.Parent().SpanID() == batch.SpanID() {
					children = append(children, s.Name())
				}
			}
			require.Subset(t, children, []string{"horizon test_process", "read test_process", "commit test_process"})
			var found bool
			for _, s := range tr.named("batch test_process") {
				found = found || s.SpanContext().SpanID() == batch.SpanID()
			}
			require.True(t, found, "the batch span was ended")
		})
	}
}

func TestTracingShowsAttemptsHaltsAndParks(t *testing.T) {
	t.Parallel()
	t.Run("a retried record shows each attempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		_, ids := tr.write(t, b, "a", 2)
		var mu sync.Mutex
		calls := 0
		b.cfg.Handler = handlers.HandlerFunc[event](func(ctx context.Context, rec *handlers.Record[event]) error {
			if rec.Value.ID != ids[0] {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls < 3 {
				return errTest
			}
			return nil
		})
		stop := start(t, b.cfg)
		waitFor(t, "the second record delivered", func() bool { return len(tr.deliveries(ids[1])) == 1 })
		require.NoError(t, stop())

		ds := tr.deliveries(ids[0])
		require.Len(t, ds, 3)
		for i, d := range ds {
			require.Equal(t, int64(i+1), attr(d, "inorder.record.attempt").AsInt64())
		}
		for _, d := range ds[:2] {
			require.Equal(t, codes.Error, d.Status().Code)
			require.Equal(t, errTest.Error(), d.Status().Description)
			require.Equal(t, []string{"exception", "retrying"}, events(d))
		}
		require.Equal(t, codes.Unset, ds[2].Status().Code)
	})

	t.Run("a halt shows as an error, and an operator's skip as a span", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		_, ids := tr.write(t, b, "a", 2)
		b.h.setFail(ids[0], handlers.Permanent(errTest))
		stop := start(t, b.cfg)
		waitFor(t, "the halt", func() bool {
			ds := tr.deliveries(ids[0])
			return len(ds) > 0 && slicesContain(events(ds[0]), "halted")
		})
		d := tr.deliveries(ids[0])[0]
		require.Equal(t, codes.Error, d.Status().Code)
		require.Equal(t, "true", attrOfEvent(d, "halted", "inorder.record.permanent"))

		_, err := cursor.Skip(context.Background(), b.db.Pool, "test_process", fmt.Sprint(ids[0]),
			cursor.ActionOpts{Actor: "ops", Reason: "refused for good"})
		require.NoError(t, err)
		waitFor(t, "the record after it", func() bool { return len(tr.deliveries(ids[1])) == 1 })
		require.NoError(t, stop())
		ops := tr.named("operator test_process")
		require.Len(t, ops, 1)
		require.Equal(t, []string{"skipped"}, events(ops[0]))
	})

	t.Run("a parked key shows on its records", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		b.cfg.OnHalt = processor.OnHaltPark
		_, bad := tr.write(t, b, "bad", 2)
		_, good := tr.write(t, b, "good", 1)
		b.h.setFail(bad[0], handlers.Permanent(errTest))
		stop := start(t, b.cfg)
		waitFor(t, "the other key", func() bool { return len(tr.deliveries(good[0])) == 1 })
		require.NoError(t, stop())
		first := tr.deliveries(bad[0])
		require.Len(t, first, 1)
		require.Equal(t, codes.Error, first[0].Status().Code)
		require.Equal(t, []string{"exception", "parked"}, events(first[0]))
		behind := tr.deliveries(bad[1])
		require.Len(t, behind, 1, "parked behind its key without a handler call, and traced so")
		require.Equal(t, []string{"parked"}, events(behind[0]))
	})
}

func attrOfEvent(s sdktrace.ReadOnlySpan, event, key string) string {
	for _, e := range s.Events() {
		if e.Name != event {
			continue
		}
		for _, a := range e.Attributes {
			if string(a.Key) == key {
				return a.Value.String()
			}
		}
	}
	return ""
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestTracingOnTheOtherPaths(t *testing.T) {
	t.Parallel()

	t.Run("a sampler that leaves batches out keeps the deliveries of sampled writes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		tr.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.recorder),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
		b.cfg.TracerProvider = tr.tp
		app, ids := tr.write(t, b, "a", 2)
		untraced := b.insert(t, 1)[0]
		stop := start(t, b.cfg)
		waitFor(t, "every record", func() bool { return b.h.count() == 3 })
		require.NoError(t, stop())
		for _, id := range ids {
			ds := tr.deliveries(id)
			require.Len(t, ds, 1, "the application's sampled trace has the delivery of record %d", id)
			require.Equal(t, app.TraceID(), ds[0].SpanContext().TraceID())
		}
		require.Empty(t, tr.deliveries(untraced), "a row without a trace context follows its unsampled batch")
		require.Empty(t, tr.named("batch test_process"))
	})

	t.Run("a batch handler's records are delivered in their traces, the handler in the batch's", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		b.projectionTable(t, "by_aggregate")
		var mu sync.Mutex
		var got []trace.SpanContext
		proj := &projection{table: "by_aggregate"}
		b.cfg.Handler, b.cfg.TxHandler = nil, tracedBatch{proj, func(ctx context.Context) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, trace.SpanContextFromContext(ctx))
		}}
		b.cfg.Checkpoint = processor.CheckpointBatch
		app, ids := tr.write(t, b, "a", 3)
		stop := start(t, b.cfg)
		waitFor(t, "the read model", func() bool { return b.readModel(t, "by_aggregate")["a"] == "3/2" })
		require.NoError(t, stop())
		for _, id := range ids {
			ds := tr.deliveries(id)
			require.Len(t, ds, 1)
			require.Equal(t, app.SpanID(), ds[0].Parent().SpanID())
		}
		batches := tr.named("batch test_process")
		require.NotEmpty(t, batches)
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, got)
		require.Equal(t, batches[0].SpanContext().SpanID(), got[0].SpanID(), "HandleTxBatch gets the batch's span")
	})

	t.Run("an async sink's refusal at send is one error, then parked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := setupTracing(t, b)
		_, ids := tr.write(t, b, "a", 2)
		_, other := tr.write(t, b, "b", 1)
		b.cfg.Handler = &refusingAsync{refuse: ids[0]}
		b.cfg.OnHalt = processor.OnHaltPark
		stop := start(t, b.cfg)
		waitFor(t, "the other key", func() bool { return len(tr.deliveries(other[0])) == 1 })
		require.NoError(t, stop())
		ds := tr.deliveries(ids[0])
		require.Len(t, ds, 1)
		require.Equal(t, []string{"exception", "parked"}, events(ds[0]))
	})
}

// tracedBatch is a projection that tells what context each batch call got.
type tracedBatch struct {
	*projection
	saw func(context.Context)
}

func (t tracedBatch) HandleTxBatch(ctx context.Context, tx pgx.Tx, recs []*handlers.Record[event]) error {
	t.saw(ctx)
	return t.projection.HandleTxBatch(ctx, tx, recs)
}

// refusingAsync is an AsyncHandler that refuses one record at send and accepts the others at once.
type refusingAsync struct{ refuse int64 }

type accepted struct{}

func (accepted) Wait(context.Context) error { return nil }

func (a *refusingAsync) Handle(ctx context.Context, rec *handlers.Record[event]) error {
	res, err := a.Send(ctx, rec)
	if err != nil {
		return err
	}
	return res.Wait(ctx)
}

func (a *refusingAsync) Send(_ context.Context, rec *handlers.Record[event]) (handlers.Result, error) {
	if rec.Value.ID == a.refuse {
		return nil, handlers.Permanent(errTest)
	}
	return accepted{}, nil
}

func (a *refusingAsync) MaxInFlight() int { return 4 }
