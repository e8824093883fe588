package pubsub_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/pubsub"
	"github.com/inorder-dev/inorder/internal/setting"
	"github.com/inorder-dev/inorder/processor"
)

// TestOrderPerKey runs the processor over an outbox table with several aggregates interleaved and checks
// that every record arrives exactly once and, per ordering key, in order, one record at a time and with
// many in flight.
func TestOrderPerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxInFlight int
		rows        int
	}{
		{"one in flight", 1, 60},
		{"fifty in flight", 50, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			topic := f.topic(t, "bookings")
			d := newDB(t, "outbox", outboxDDL)
			h := newHandler(t, pubsub.Config{Client: f.client, Topic: "bookings", MaxInFlight: tc.maxInFlight})
			require.Equal(t, tc.maxInFlight, h.MaxInFlight())

			ids := d.insertOutbox(t, 0, tc.rows/2, 5)
			stop := run(t, d, "orders", "outbox", h)
			ids = append(ids, d.insertOutbox(t, tc.rows/2, tc.rows-tc.rows/2, 5)...) // more while it runs
			last := ids[len(ids)-1]
			eventually(t, "the position to reach the last record", func() bool {
				return d.cursor(t, "orders").PositionID == last
			})
			require.NoError(t, stop())

			msgs := f.messages(topic)
			require.Equal(t, len(ids), requireOrderedPerKey(t, msgs, ids), "no failure, so no duplicate")
			// The payloads say the same per key: n strictly increases.
			lastN := map[string]int{}
			for _, m := range msgs {
				var p struct{ N int }
				require.NoError(t, json.Unmarshal(m.Data, &p))
				require.Greater(t, p.N, lastN[m.OrderingKey], "key %s", m.OrderingKey)
				lastN[m.OrderingKey] = p.N
			}
			require.Len(t, lastN, 5)
		})
	}
}

// TestPublishFailureHaltsAndResumes refuses the publishes of one record: the stream must halt on exactly
// that record with the position before it, nothing after it on its key may be acknowledged while it is
// refused (across several redeliveries), and once the refusals stop the stream must go on to the end with
// the first acknowledgements still in order per key.
func TestPublishFailureHaltsAndResumes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxInFlight int
		settings    *gpubsub.PublishSettings
		// exact: every publish request carries one message, so the halted record is the refused one
		// itself. Otherwise the client batches messages of a key into one request and the stream may halt
		// on an earlier record of the refused request.
		exact bool
	}{
		{"one in flight", 1, nil, true},
		{"fifty in flight one per request", 50, &gpubsub.PublishSettings{CountThreshold: 1}, true},
		{"fifty in flight batched", 50, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			topic := f.topic(t, "bookings")
			d := newDB(t, "outbox", outboxDDL)
			h := newHandler(t, pubsub.Config{Client: f.client, Topic: topic, MaxInFlight: tc.maxInFlight,
				PublishSettings: tc.settings})

			ids := d.insertOutbox(t, 0, 90, 3) // keys k1, k2, k0, k1, ...
			target := ids[30]                  // a record of k1 in the middle
			f.inject.arm(target, true)
			stop := run(t, d, "failing", "outbox", h)

			var halted cursorRow
			eventually(t, "the stream to halt, retried at least twice", func() bool {
				halted = d.cursor(t, "failing")
				return halted.HaltedRecordID != "" && halted.HaltedAttempts >= 3
			})
			if tc.exact {
				require.Equal(t, target, halted.HaltedRecordID)
			} else {
				require.LessOrEqual(t, idNum(t, halted.HaltedRecordID), idNum(t, target))
			}
			require.Contains(t, halted.HaltedError, "injected failure for record "+target)
			require.Contains(t, halted.HaltedError, "record "+halted.HaltedRecordID)
			require.Less(t, idNum(t, halted.PositionID), idNum(t, halted.HaltedRecordID), "position stays before the halted record")

			// While the record is refused, nothing at or after it on its key has been acknowledged.
			msgs := f.messages(topic)
			for _, m := range msgs {
				if m.OrderingKey == "k1" {
					require.Less(t, idNum(t, m.Attributes[handlers.HeaderID]), idNum(t, halted.HaltedRecordID),
						"acknowledged while the stream is halted on %s: %s", halted.HaltedRecordID, describe(msgs))
				}
			}
			require.GreaterOrEqual(t, f.inject.refusals(), 3)

			f.inject.arm(target, false)
			last := ids[len(ids)-1]
			eventually(t, "the stream to resume and reach the last record", func() bool {
				c := d.cursor(t, "failing")
				return c.PositionID == last && c.HaltedRecordID == ""
			})
			require.NoError(t, stop())
			requireOrderedPerKey(t, f.messages(topic), ids)
		})
	}
}

// TestResumeWaitsForQueuedMessages drives the handler directly to pin down when a paused key is resumed. A
// large record fails alone in its request while the next record on its key is still waiting in the
// client's batcher. Resuming as soon as the failure is seen would let that next record through; it must be
// refused instead, and go through only when published again after the failed record.
func TestResumeWaitsForQueuedMessages(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic := f.topic(t, "bookings")
	// The large record fills a batch by itself and is sent at once; a small one waits DelayThreshold.
	h := newHandler(t, pubsub.Config{Client: f.client, Topic: topic, PublishSettings: &gpubsub.PublishSettings{
		DelayThreshold: 300 * time.Millisecond, CountThreshold: 100, ByteThreshold: 1000, Timeout: 10 * time.Second,
	}})
	ctx := context.Background()
	rec := func(id, payload string) *handlers.Record[handlers.Row] {
		return &handlers.Record[handlers.Row]{Process: "p", ID: id, Key: "k", CreatedAt: time.Now(),
			Value: handlers.Row{Columns: []string{"id", "payload"}, Values: []any{id, payload}}}
	}
	large := strings.Repeat("x", 2000)

	require.NoError(t, h.Handle(ctx, rec("1", "a")))
	f.inject.arm("2", true)
	r2, err := h.Send(ctx, rec("2", large))
	require.NoError(t, err)
	r3, err := h.Send(ctx, rec("3", "c"))
	require.NoError(t, err)
	err2 := r2.Wait(ctx)
	require.ErrorContains(t, err2, "injected failure for record 2")
	require.False(t, handlers.IsPermanent(err2))
	// Record 3 is refused either as queued behind the failed record (the usual case) or, when the client
	// bundled both into one request on a busy machine, with it. Either way it must not be acknowledged
	// before record 2, which the next lines check.
	err3 := r3.Wait(ctx)
	require.Error(t, err3)
	require.True(t, strings.Contains(err3.Error(), "not published because an earlier message with ordering key \"k\" failed") ||
		strings.Contains(err3.Error(), "injected failure for record 2"), "record 3 refused for another reason: %v", err3)
	require.Len(t, f.messages(topic), 1, "only record 1 may be acknowledged: %s", describe(f.messages(topic)))

	// Delivered again, the failed record goes first and the key is open again.
	f.inject.arm("2", false)
	require.NoError(t, h.Handle(ctx, rec("2", large)))
	require.NoError(t, h.Handle(ctx, rec("3", "c")))
	var got []string
	for _, m := range f.messages(topic) {
		got = append(got, m.Attributes[handlers.HeaderID])
	}
	require.Equal(t, []string{"1", "2", "3"}, got)
}

// TestWaitEndsBeforeTheAnswer lets a wait end while Pub/Sub has not answered yet: the wait fails, and the
// record sent again queues behind the first publish on its key instead of blocking, both settling once
// Pub/Sub answers.
func TestWaitEndsBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.topic(t, "bookings")
	f.srv.SetAutoPublishResponse(false) // every publish waits for an answer added below
	h := newHandler(t, pubsub.Config{Client: f.client, Topic: "bookings"})
	ctx := context.Background()
	rec := &handlers.Record[handlers.Row]{Process: "p", ID: "1", Key: "k", CreatedAt: time.Now()}

	first, err := h.Send(ctx, rec)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = first.Wait(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "record 1 on projects/test-project/topics/bookings: no acknowledgement yet")

	again, err := h.Send(ctx, rec)
	require.NoError(t, err)
	f.srv.AddPublishResponse(&pubsubpb.PublishResponse{MessageIds: []string{"m1"}}, nil)
	require.NoError(t, first.Wait(ctx))
	f.srv.AddPublishResponse(&pubsubpb.PublishResponse{MessageIds: []string{"m2"}}, nil)
	require.NoError(t, again.Wait(ctx))
}

// TestMessageDataAndAttributes checks the message built from a record with a payload column, from one
// without, and the permanent halt on a record too large to publish.
func TestMessageDataAndAttributes(t *testing.T) {
	t.Parallel()

	t.Run("payload column", func(t *testing.T) {
		t.Parallel()
		f := newFake(t)
		topic := f.topic(t, "bookings")
		d := newDB(t, "outbox", outboxDDL)
		h := newHandler(t, pubsub.Config{Client: f.client, Topic: "bookings"})
		ids := d.insert(t, `INSERT INTO outbox (aggregate_id, type, payload)
			VALUES ('booking-7', 'booking.created', '{"seats": 2, "name": "Ada"}') RETURNING id`)
		var payload string
		var createdAt time.Time
		require.NoError(t, d.Pool.QueryRow(context.Background(),
			"SELECT payload::text, created_at FROM outbox WHERE id = $1", ids[0]).Scan(&payload, &createdAt))

		run(t, d, "attrs", "outbox", h)
		eventually(t, "the message", func() bool { return f.published(topic, ids) })
		m := f.messages(topic)[0]
		require.Equal(t, payload, string(m.Data), "the payload column's bytes are the data")
		require.Equal(t, "booking-7", m.OrderingKey)
		require.Equal(t, map[string]string{
			handlers.HeaderID:        ids[0],
			handlers.HeaderProcess:   "attrs",
			handlers.HeaderCreatedAt: createdAt.UTC().Format(time.RFC3339Nano),
			handlers.HeaderEventType: "booking.created",
		}, m.Attributes)
		at, err := time.Parse(time.RFC3339Nano, m.Attributes[handlers.HeaderCreatedAt])
		require.NoError(t, err)
		require.True(t, at.Equal(createdAt))
	})

	t.Run("whole record without a payload column", func(t *testing.T) {
		t.Parallel()
		f := newFake(t)
		topic := f.topic(t, "audit")
		d := newDB(t, "audit", `
			CREATE TABLE audit (
				id           bigserial PRIMARY KEY,
				aggregate_id text NOT NULL,
				event_type   text NOT NULL,
				body         text,
				extra        jsonb,
				created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
			);
			CREATE INDEX ON audit (created_at, id);`)
		h := newHandler(t, pubsub.Config{Client: f.client, Topic: "audit"})
		ids := d.insert(t, `INSERT INTO audit (aggregate_id, event_type, body, extra, created_at)
			VALUES ('a-1', 'user.renamed', 'hello', '{"x": [1, 2]}', '2024-05-06T07:08:09.123456Z') RETURNING id`)

		run(t, d, "audit", "audit", h)
		eventually(t, "the message", func() bool { return f.published(topic, ids) })
		m := f.messages(topic)[0]
		require.JSONEq(t, `{"id": `+ids[0]+`, "aggregate_id": "a-1", "event_type": "user.renamed", "body": "hello",
			"extra": {"x": [1, 2]}, "created_at": "2024-05-06T07:08:09.123456Z"}`, string(m.Data))
		require.True(t, strings.HasPrefix(string(m.Data), `{"id":`), "columns in table order: %s", m.Data)
		require.Equal(t, "a-1", m.OrderingKey)
		require.Equal(t, "user.renamed", m.Attributes[handlers.HeaderEventType])
		require.Equal(t, "2024-05-06T07:08:09.123456Z", m.Attributes[handlers.HeaderCreatedAt])
	})

	t.Run("bytea payload column", func(t *testing.T) {
		t.Parallel()
		f := newFake(t)
		topic := f.topic(t, "blobs")
		d := newDB(t, "blobs", `
			CREATE TABLE blobs (
				id         bigserial PRIMARY KEY,
				payload    bytea,
				created_at timestamptz NOT NULL DEFAULT clock_timestamp()
			);
			CREATE INDEX ON blobs (created_at, id);`)
		h := newHandler(t, pubsub.Config{Client: f.client, Topic: "blobs"})
		ids := d.insert(t, `INSERT INTO blobs (payload) VALUES ('\x00ff10'::bytea), (NULL) RETURNING id`)

		run(t, d, "blobs", "blobs", h)
		eventually(t, "the messages", func() bool { return f.published(topic, ids) })
		byID := map[string]*pstest.Message{} // without an ordering key, Pub/Sub keeps no order
		for _, m := range f.messages(topic) {
			byID[m.Attributes[handlers.HeaderID]] = m
			require.Empty(t, m.OrderingKey, "no key column: no ordering key")
			require.NotContains(t, m.Attributes, handlers.HeaderEventType)
		}
		require.Equal(t, []byte{0x00, 0xff, 0x10}, byID[ids[0]].Data, "bytea as is")
		require.Empty(t, byID[ids[1]].Data, "NULL as empty data")
	})

	t.Run("oversized record halts permanently", func(t *testing.T) {
		t.Parallel()
		f := newFake(t)
		topic := f.topic(t, "bookings")
		d := newDB(t, "outbox", outboxDDL)
		h := newHandler(t, pubsub.Config{Client: f.client, Topic: "bookings", MaxMessageBytes: 500})
		ids := d.insert(t, `INSERT INTO outbox (aggregate_id, type, payload)
			VALUES ('k', 't', '{"small": true}'), ('k', 't', jsonb_build_object('big', repeat('x', 600))),
			       ('k', 't', '{"after": true}')
			RETURNING id`)

		run(t, d, "big", "outbox", h)
		var c cursorRow
		eventually(t, "the halt on the large record", func() bool {
			c = d.cursor(t, "big")
			return c.HaltedRecordID == ids[1]
		})
		require.Equal(t, ids[0], c.PositionID)
		require.Contains(t, c.HaltedError, "permanent")
		require.Regexp(t, `record `+ids[1]+` is \d+ bytes as a message, more than the limit of 500 bytes`, c.HaltedError)
		require.Equal(t, []string{ids[0]}, func() []string {
			var got []string
			for _, m := range f.messages(topic) {
				got = append(got, m.Attributes[handlers.HeaderID])
			}
			return got
		}())
	})
}

// TestTopicChoice publishes records directly through Handle to topics chosen by TopicTemplate (with the
// fallback to Topic) and by TopicFunc.
func TestTopicChoice(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	created := f.topic(t, "events-booking.created")
	cancelled := f.topic(t, "events-booking.cancelled")
	other := f.topic(t, "other")
	ctx := context.Background()
	row := func(cols ...string) handlers.Row {
		r := handlers.Row{}
		for i := 0; i < len(cols); i += 2 {
			r.Columns = append(r.Columns, cols[i])
			r.Values = append(r.Values, cols[i+1])
		}
		return r
	}
	rec := func(id string, r handlers.Row) *handlers.Record[handlers.Row] {
		return &handlers.Record[handlers.Row]{Process: "p", ID: id, Key: "k", CreatedAt: time.Now(), Value: r}
	}

	h := newHandler(t, pubsub.Config{Client: f.client, TopicTemplate: "events-{type}", Topic: "other"})
	require.NoError(t, h.Handle(ctx, rec("1", row("type", "booking.created"))))
	require.NoError(t, h.Handle(ctx, rec("2", row("event_type", "booking.cancelled"))))
	require.NoError(t, h.Handle(ctx, rec("3", row("kind", "none"))))
	require.Len(t, f.messages(created), 1)
	require.Len(t, f.messages(cancelled), 1)
	require.Equal(t, "booking.cancelled", f.messages(cancelled)[0].Attributes[handlers.HeaderEventType])
	require.Len(t, f.messages(other), 1)

	// A type that cannot make a topic ID, or no type and no fallback, is the record's permanent failure.
	err := h.Handle(ctx, rec("4", row("type", "has space")))
	require.True(t, handlers.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "record 4")
	noFallback := newHandler(t, pubsub.Config{Client: f.client, TopicTemplate: "events-{type}"})
	err = noFallback.Handle(ctx, rec("5", row("kind", "none")))
	require.True(t, handlers.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "record 5 has no type or event_type")

	byFunc := newHandler(t, pubsub.Config{Client: f.client, Topic: "ignored-topic",
		TopicFunc: func(rec *handlers.Record[handlers.Row]) (string, error) {
			return "projects/" + project + "/topics/other", nil
		}})
	require.NoError(t, byFunc.Handle(ctx, rec("6", row("type", "booking.created"))))
	require.Len(t, f.messages(other), 2)

	// The one topic of every record does not exist: the sink's outage, which the stream waits out until
	// someone creates the topic, never halting or parking for it.
	missing := newHandler(t, pubsub.Config{Client: f.client, Topic: "missing"})
	err = missing.Handle(ctx, rec("7", row()))
	require.ErrorContains(t, err, "record 7")
	require.False(t, handlers.IsPermanent(err), "%v", err)
	u, ok := handlers.UnavailableOf(err)
	require.True(t, ok, "%v", err)
	require.Contains(t, u.Check, "the topic projects/"+project+"/topics/missing")
}

// TestNewAndClose checks the configuration errors and that a closed handler refuses records.
func TestNewAndClose(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	for _, tc := range []struct {
		cfg  pubsub.Config
		want string
	}{
		{pubsub.Config{Topic: "t-1"}, "Config.Client is required"},
		{pubsub.Config{Client: f.client}, "one of Config.Topic, Config.TopicTemplate and Config.TopicFunc is required"},
		{pubsub.Config{Client: f.client, Topic: "a b"}, `topic ID "a b" is not valid`},
		{pubsub.Config{Client: f.client, Topic: "projects/p/subscriptions/s"}, "neither a topic ID nor a full name"},
		{pubsub.Config{Client: f.client, TopicTemplate: "events"}, "does not contain {type}"},
		{pubsub.Config{Client: f.client, Topic: "t-1", MaxInFlight: -1}, "MaxInFlight -1 is negative"},
		{pubsub.Config{Client: f.client, Topic: "t-1", MaxMessageBytes: -1}, "MaxMessageBytes -1 is negative"},
		{pubsub.Config{Client: f.client, Topic: "t-1", PublishSettings: &gpubsub.PublishSettings{
			HedgingSettings: &gpubsub.HedgingSettings{}}}, "hedging cannot be combined with ordering keys"},
	} {
		_, err := pubsub.New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}

	topic := f.topic(t, "t-1")
	h, err := pubsub.New(pubsub.Config{Client: f.client, Topic: "t-1"})
	require.NoError(t, err)
	require.Equal(t, setting.DefaultPubSubMaxInFlight, h.MaxInFlight())
	rec := &handlers.Record[handlers.Row]{Process: "p", ID: "1", Key: "k", CreatedAt: time.Now()}
	res, err := h.Send(context.Background(), rec)
	require.NoError(t, err)
	require.NoError(t, h.Close(), "Close flushes what was sent")
	require.NoError(t, res.Wait(context.Background()))
	require.Len(t, f.messages(topic), 1)
	other := *rec
	other.Process = "q"
	_, err = h.Send(context.Background(), &other)
	require.True(t, handlers.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, `record 1 of process "q": this handler serves process "p"`)
	_, err = h.Send(context.Background(), rec)
	require.ErrorContains(t, err, "handler is closed")
	require.NoError(t, h.Close())
}

// TestARefusedKeyParks relays with OnHaltPark: the publishes of one record of k1 are refused for longer
// than HaltAfter, so k1 parks; the other keys are published in full while nothing of k1 after the record
// is acknowledged. Once the refusals stop, a redrive publishes k1's records, first acknowledgements in
// order per key.
func TestARefusedKeyParks(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic := f.topic(t, "bookings")
	d := newDB(t, "outbox", outboxDDL)
	h := newHandler(t, pubsub.Config{Client: f.client, Topic: topic, MaxInFlight: 50,
		PublishSettings: &gpubsub.PublishSettings{CountThreshold: 1}})
	ids := d.insertOutbox(t, 0, 90, 3) // keys k1, k2, k0, k1, ...
	target := ids[30]                  // a record of k1 in the middle
	f.inject.arm(target, true)
	runWith(t, d, "parking", "outbox", h, func(c *processor.Config[handlers.Row]) {
		c.OnHalt, c.HaltAfter = processor.OnHaltPark, 200*time.Millisecond
	})

	last := ids[len(ids)-1]
	eventually(t, "the key parked and the stream at its end", func() bool {
		c := d.cursor(t, "parking")
		return c.PositionID == last && c.HaltedRecordID == ""
	})
	keys, err := cursor.Parked(context.Background(), d.Pool, "parking")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "k1", keys[0].Key)
	require.Equal(t, target, keys[0].Head)
	require.Equal(t, 20, keys[0].Records, "the record and the 19 of its key after it")
	for _, m := range f.messages(topic) {
		if m.OrderingKey == "k1" {
			require.Less(t, idNum(t, m.Attributes[handlers.HeaderID]), idNum(t, target), "acknowledged while parked")
		}
	}

	f.inject.arm(target, false)
	_, err = cursor.Redrive(context.Background(), d.Pool, "parking", cursor.RedriveOpts{All: true,
		ActionOpts: cursor.ActionOpts{Actor: "test", Reason: "the topic accepts it"}})
	require.NoError(t, err)
	eventually(t, "nothing parked", func() bool {
		keys, err := cursor.Parked(context.Background(), d.Pool, "parking")
		require.NoError(t, err)
		return len(keys) == 0
	})
	requireOrderedPerKey(t, f.messages(topic), ids)
}
