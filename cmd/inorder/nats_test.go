package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/natstest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
)

// natsStream starts a NATS server with a stream ORDERS capturing orders.> (the default duplicate window,
// two minutes) and returns the server and a JetStream client on it.
func natsStream(t *testing.T) (*natstest.Server, njs.JetStream) {
	t.Helper()
	srv := natstest.New(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, njs.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	return srv, js
}

// TestNatsFlagsGetOneClearLine checks that every wrong use of the NATS flags, and a subject that no
// stream captures, is refused with one line naming the flag (and the subject), before any position moves.
func TestNatsFlagsGetOneClearLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.book(t, 1, "1")
	srv, _ := natsStream(t)
	natsArgs := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "nats", "--nats-url", srv.URL(), "--nats-subject", "orders.all"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no url", runArgs("--handler", "nats", "--nats-subject", "orders.all"), 2,
			"inorder run: --handler nats needs --nats-url (nats://host:port)"},
		{"no subject", runArgs("--handler", "nats", "--nats-url", srv.URL()), 2, "--handler nats needs --nats-subject"},
		{"window below one", natsArgs("--nats-max-in-flight", "0"), 2, "--nats-max-in-flight must be at least 1, got 0"},
		{"wildcard subject", natsArgs("--nats-subject", "orders.*"), 2,
			`inorder run: --nats-subject: jetstream: Config.Subject "orders.*": a subject to publish to holds no wildcard`},
		{"nats flags with stdout", runArgs("--nats-url", srv.URL()), 2, "--nats-* flags need --handler nats"},
		{"nats flags with kafka", runArgs("--handler", "kafka", "--kafka-brokers", "127.0.0.1:1", "--kafka-topic", "t",
			"--nats-max-in-flight", "4"), 2, "--nats-* flags need --handler nats"},
		{"kafka flags with nats", natsArgs("--kafka-topic", "t"), 2, "--kafka-* flags need --handler kafka"},
		{"webhook flags with nats", natsArgs("--webhook-url", "http://127.0.0.1:1"), 2,
			"--webhook-* and --pubsub-* flags contradict --handler nats"},
		{"no stream captures the subject", natsArgs("--nats-subject", "invoices.{key}"), 1,
			"inorder run: --nats-subject: jetstream: no stream captures subject invoices.*: add it to a stream's subjects"},
		{"no server", runArgs("--handler", "nats", "--nats-url", "nats://127.0.0.1:1", "--nats-subject", "orders.all"), 1,
			"inorder run: --nats-url: connect to nats://127.0.0.1:1: nats: no servers available for connection"},
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

// TestRunRelaysToJetStreamAcrossTwoSIGKILLs is the JetStream sink's end-to-end test: 1,200 bookings over
// 40 keys, published by the binary to a subject per key with a window of 32, through a proxy that delays
// each direction by 5 ms so that records are in flight when the binary is killed. It is killed twice with
// SIGKILL mid-run, and a third run finishes. Read back with the NATS client, the stream holds every
// booking exactly once (the records delivered again after each kill were dropped by the stream's
// duplicate window, by Nats-Msg-Id), each key's subject in order.
func TestRunRelaysToJetStreamAcrossTwoSIGKILLs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, js := natsStream(t)
	proxy, err := tcpproxy.Start(tcpproxy.Config{Target: srv.Addr(), Delay: 5 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	const total, keys, window = 1200, 40, 32
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount)
		SELECT 'customer-' || (g %% %d), 1 FROM generate_series(1, %d) g`, keys, total))
	args := runArgs("--columns", "id,aggregate_id", "--handler", "nats", "--nats-url", "nats://"+proxy.Addr(),
		"--nats-subject", "orders.{key}", "--nats-max-in-flight", strconv.Itoa(window))
	ctx := context.Background()
	stream, err := js.Stream(ctx, "ORDERS")
	require.NoError(t, err)
	stored := func() int {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return int(info.State.Msgs)
	}

	for i, upTo := range []int{total / 3, 2 * total / 3} {
		p := startBinary(t, b.env, args...)
		require.Eventually(t, func() bool { return stored() >= upTo }, 30*time.Second, 2*time.Millisecond, p.logs())
		require.NoError(t, p.cmd.Process.Kill()) // mid-window: publishes awaiting their ack, no chance to unlock
		p.wait(t)
		n := stored()
		require.Less(t, n, total, "kill %d came after the last record: nothing was in flight", i+1)
		pos, _ := strconv.Atoi(b.position(t))
		t.Logf("kill %d: %d stored, durable position %d: up to %d delivered again", i+1, n, pos, n-pos)
	}
	last := startBinary(t, b.env, args...)
	require.Eventually(t, func() bool { return b.position(t) == strconv.Itoa(total) }, 30*time.Second, 10*time.Millisecond, last.logs())

	// Read everything back in stream order with an ordered consumer.
	cons, err := stream.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(total + 100)
	require.NoError(t, err)
	seen := map[int64]bool{}
	lastOfKey := map[string]int64{}
	for m := range batch.Messages() {
		var row struct {
			ID          int64  `json:"id"`
			AggregateID string `json:"aggregate_id"`
		}
		require.NoError(t, json.Unmarshal(m.Data(), &row), "the whole row as JSON: %s", m.Data())
		require.Equal(t, "orders."+row.AggregateID, m.Subject(), "the key's subject")
		h := m.Headers()
		require.Equal(t, "booking_sms:"+strconv.FormatInt(row.ID, 10), h.Get(njs.MsgIDHeader))
		require.Equal(t, row.AggregateID, h.Get(handlers.HeaderKey))
		require.False(t, seen[row.ID], "booking %d stored twice: the duplicate window did not drop it", row.ID)
		seen[row.ID] = true
		require.Greater(t, row.ID, lastOfKey[row.AggregateID], "order per key")
		lastOfKey[row.AggregateID] = row.ID
	}
	require.NoError(t, batch.Error())
	require.Len(t, seen, total, "every booking once")
	require.Len(t, lastOfKey, keys)
	require.Equal(t, total, stored(), "no duplicate in the stream")
}

// TestAStreamDeletedMidRunIsTheSinkOutage deletes the stream while the binary runs: every publish meets
// no stream, which status shows as the sink's outage naming the subject, never as a halt; once the stream
// is back, the stream flows again by itself and the new stream holds the records published after it.
func TestAStreamDeletedMidRunIsTheSinkOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, js := natsStream(t)
	ctx := context.Background()
	b.book(t, 30, "1")
	p := startBinary(t, b.env, runArgs("--handler", "nats", "--nats-url", srv.URL(), "--nats-subject", "orders.{key}",
		"--nats-max-in-flight", "4")...)
	require.Eventually(t, func() bool { return b.position(t) == "30" }, 30*time.Second, 10*time.Millisecond, p.logs())

	require.NoError(t, js.DeleteStream(ctx, "ORDERS"))
	b.book(t, 30, "1")
	require.Eventually(t, func() bool {
		code, out, errOut := runBinary(t, b.env, "status", "--json")
		require.Zero(t, code, errOut)
		var rep statusDoc
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		require.Len(t, rep.Processes, 1)
		ps := rep.Processes[0]
		require.NotEqual(t, "halted", ps.State, out)
		if ps.State != "sink unavailable" {
			return false
		}
		require.NotNil(t, ps.Halt, out)
		require.NotNil(t, ps.Halt.Unavailable, out)
		require.Contains(t, *ps.Halt.Unavailable, "a stream whose subjects include orders.customer-")
		require.Nil(t, ps.Halt.HaltedAt, out)
		return true
	}, 30*time.Second, 20*time.Millisecond, p.logs())
	require.Equal(t, "30", b.position(t), "nothing moves past a record no stream stored")

	_, err := js.CreateStream(ctx, njs.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.position(t) == "60" }, 30*time.Second, 10*time.Millisecond, p.logs())
	require.Eventually(t, func() bool {
		return strings.Contains(p.logs(), `"message":"the sink accepts again: its outage is over, and the stream flows"`)
	}, 20*time.Second, 20*time.Millisecond)
	stream, err := js.Stream(ctx, "ORDERS")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 30, info.State.Msgs, "the records after the outage, each once")
}
