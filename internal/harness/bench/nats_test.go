package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/jetstream"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/natstest"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

// Sizes of the JetStream measures.
const (
	natsKeys     = 64    // aggregates (record keys) the outbox is spread over: a subject each
	natsRowsOne  = 5000  // one record in flight
	natsRowsMany = 30000 // 64 in flight
	natsInFlight = 64
)

// natsLines are the JetStream lines of the table: raw nats.go to nats-server, then inorder beside it.
func natsLines() []line {
	return []line{
		{key: "nats_raw1", label: "nats.go to nats-server JetStream, 1 publisher, sync", limit: true},
		{key: "nats_raw64", label: "nats.go to nats-server JetStream, 64 publishers, sync", limit: true},
		{key: "nats1", label: "inorder nats to nats-server JetStream, in flight 1", ref: "nats_raw1", refLabel: "nats.go, 1 publisher"},
		{key: "nats64", label: "inorder nats to nats-server JetStream, in flight 64", ref: "nats_raw64",
			refLabel: "nats.go, 64 publishers"},
	}
}

// natsNote is the footnote on the JetStream lines.
func natsNote(note func(format string, args ...any)) {
	note("nats: Debian's nats-server with JetStream on loopback, one stream of file storage capturing bench.* with "+
		"the default duplicate window (two minutes); the outbox spread over %d keys, a subject each (bench.{key}), %s "+
		"rows with one in flight and %s with %d; inorder with checkpoint batch and BatchSize 1000, the handler "+
		"publishing each record and waiting for its PubAck, the keyed window making %d at once. The references are "+
		"plain nats.go JetStream clients publishing the same messages (data, Nats-Msg-Id and the handler's headers) "+
		"to the same server: one goroutine, and %d goroutines each publishing its share one message after another "+
		"(PublishMsg, waiting for each PubAck), with no database.", natsKeys, thousands(natsRowsOne),
		thousands(natsRowsMany), natsInFlight, natsInFlight, natsInFlight)
}

// newNats starts a server with the bench stream and returns a JetStream client on it.
func newNats(tb testing.TB) (njs.JetStream, njs.Stream) {
	tb.Helper()
	srv := natstest.New(tb)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		tb.Fatalf("nats: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	s, err := js.CreateStream(context.Background(), njs.StreamConfig{Name: "BENCH", Subjects: []string{"bench.*"}})
	if err != nil {
		tb.Fatalf("create stream: %v", err)
	}
	return js, s
}

// natsStored is how many messages the bench stream holds.
func natsStored(tb testing.TB, s njs.Stream) int {
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatalf("stream info: %v", err)
	}
	return int(info.State.Msgs)
}

// measureNatsRaw publishes n messages like the handler's (a small JSON body, Nats-Msg-Id and the
// handler's headers, a subject per key) with publishers goroutines, each publishing its share one
// message at a time and waiting for each PubAck.
func measureNatsRaw(tb testing.TB, publishers, n int) result {
	js, s := newNats(tb)
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for p := range publishers {
		wg.Go(func() {
			for g := p; g < n; g += publishers { // messages p, p+publishers, ...: this publisher's share
				key := "k" + strconv.Itoa(g%natsKeys)
				m := nats.NewMsg("bench." + key)
				m.Data = fmt.Appendf(nil, `{"booking":%d,"seats":2,"status":"created"}`, g)
				m.Header.Set(njs.MsgIDHeader, "bench:"+strconv.Itoa(g))
				m.Header.Set(handlers.HeaderID, strconv.Itoa(g))
				m.Header.Set(handlers.HeaderProcess, "bench")
				m.Header.Set(handlers.HeaderCreatedAt, time.Now().UTC().Format(time.RFC3339Nano))
				m.Header.Set(handlers.HeaderKey, key)
				m.Header.Set(handlers.HeaderEventType, "booking.created")
				if _, err := js.PublishMsg(ctx, m); err != nil {
					tb.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if got := natsStored(tb, s); got != n {
		tb.Fatalf("the stream holds %d messages, want %d", got, n)
	}
	return result{n: n, elapsed: elapsed}
}

// measureNats drains an outbox of n rows (jsonb payload, natsKeys keys) through the JetStream handler
// with inFlight records at once, 1000-record batches and a checkpoint per batch.
func measureNats(tb testing.TB, inFlight, n int) result {
	db := pgtest.New(tb)
	insertOutbox(tb, db, n, natsKeys)
	lastID, lastAt := lastRow(tb, db, "outbox")
	noteServer(tb, db.Pool)

	js, s := newNats(tb)
	h, err := jetstream.New(jetstream.Config{JetStream: js, Subject: "bench.{key}"})
	if err != nil {
		tb.Fatalf("jetstream handler: %v", err)
	}
	res := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     fmt.Sprintf("bench_nats_%d", inFlight),
		Source:      inordertype.Source{Table: "outbox", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		BatchSize:   1000,
		Checkpoint:  processor.CheckpointBatch,
	}, n, lastID, lastAt, 3*time.Minute)
	if got := natsStored(tb, s); got != n { // nothing failed, so nothing was published twice
		tb.Fatalf("the stream holds %d messages, want %d", got, n)
	}
	return res
}

func BenchmarkNats(b *testing.B) {
	b.Run("raw1", func(b *testing.B) {
		record(b, "nats_raw1", measureNatsRaw(b, 1, natsRowsOne))
	})
	b.Run("inflight1", func(b *testing.B) {
		record(b, "nats1", measureNats(b, 1, natsRowsOne))
	})
	b.Run("raw64", func(b *testing.B) {
		record(b, "nats_raw64", measureNatsRaw(b, natsInFlight, natsRowsMany))
	})
	b.Run("inflight64", func(b *testing.B) {
		record(b, "nats64", measureNats(b, natsInFlight, natsRowsMany))
	})
}

// TestNatsMeasures runs the JetStream measures on a few rows, so that the benchmark keeps working. It
// records no figures.
func TestNatsMeasures(t *testing.T) {
	for name, r := range map[string]result{
		"raw1":       measureNatsRaw(t, 1, 20),
		"raw64":      measureNatsRaw(t, natsInFlight, 300),
		"inflight1":  measureNats(t, 1, 20),
		"inflight64": measureNats(t, natsInFlight, 300),
	} {
		if r.n == 0 || r.rate() <= 0 {
			t.Errorf("%s: %d in %s", name, r.n, r.elapsed)
		}
	}
}
