package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"
)

// TestEnvelopeFlagErrorsAreOneLine: a bad --envelope value, an envelope for a handler without one, the
// NATS binding's missing binary mode and envelope options without --envelope each get one clear line.
func TestEnvelopeFlagErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	webhook := func(extra ...string) []string {
		return runArgs(append([]string{"--handler", "webhook", "--webhook-url", "http://127.0.0.1:1/hook",
			"--webhook-signature", "none"}, extra...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown envelope", webhook("--envelope", "xml"), `--envelope must be none or cloudevents, got "xml"`},
		{"an envelope for stdout", runArgs("--envelope", "cloudevents"),
			"--envelope cloudevents needs --handler webhook, kafka, pubsub, nats, rabbitmq or redis, not stdout"},
		{"unknown mode", webhook("--envelope", "cloudevents", "--envelope-mode", "sideways"),
			`--envelope-mode must be binary or structured, got "sideways"`},
		{"binary mode for nats", runArgs("--handler", "nats", "--envelope", "cloudevents", "--envelope-mode", "binary"),
			"the CloudEvents NATS binding defines the structured mode only"},
		{"binary mode for redis", runArgs("--handler", "redis", "--envelope", "cloudevents", "--envelope-mode", "binary"),
			"CloudEvents has no Redis binding, and a stream entry carries the structured mode only"},
		{"options without an envelope", webhook("--ce-type", "com.example.x"),
			"--envelope-mode, --ce-source and --ce-type need --envelope cloudevents"},
		{"a source that is no URI reference", webhook("--envelope", "cloudevents", "--ce-source", "http://a b/%zz"),
			"--ce-source: cloudevent: Config.Source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, b.env, tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
		})
	}
}

// TestRunWebhookSendsCloudEvents: inorder run --handler webhook --envelope cloudevents delivers 300
// bookings to a receiver that parses every request with the CloudEvents SDK's HTTP binding, in each
// content mode, with the attributes taken from each row.
func TestRunWebhookSendsCloudEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	b.book(t, n, "2.5")
	type row struct {
		key     string
		created time.Time
	}
	rows := map[string]row{}
	rs, err := b.db.Pool.Query(context.Background(), "SELECT id::text, aggregate_id, created_at FROM bookings")
	require.NoError(t, err)
	for rs.Next() {
		var id string
		var r row
		require.NoError(t, rs.Scan(&id, &r.key, &r.created))
		rows[id] = r
	}
	require.NoError(t, rs.Err())
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var (
				mu     sync.Mutex
				events []*event.Event
				bad    []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				msg := cehttp.NewMessageFromHttpRequest(r)
				enc := msg.ReadEncoding()
				ev, err := binding.ToEvent(r.Context(), msg)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || !strings.EqualFold(enc.String(), mode) {
					bad = append(bad, fmt.Sprintf("%s: %v", enc, err))
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				events = append(events, ev)
			}))
			t.Cleanup(srv.Close)
			process := "booking_ce_" + mode
			args := []string{"run", "--process", process, "--table", "bookings", "--start-from", "beginning",
				"--poll-interval", "20ms", "--retry-min", "20ms", "--retry-max", "100ms",
				"--handler", "webhook", "--webhook-url", srv.URL, "--webhook-signature", "none", "--webhook-max-in-flight", "8",
				"--envelope", "cloudevents", "--envelope-mode", mode, "--ce-type", "com.example.booking"}
			p := startBinary(t, b.env, args...)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(events)+len(bad) >= n
			}, 30*time.Second, 10*time.Millisecond, p.logs())
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			require.Zero(t, p.wait(t), p.logs())
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, bad, "requests the SDK could not parse")
			seen := map[string]bool{}
			for _, ev := range events {
				require.NoError(t, ev.Validate())
				id, ok := strings.CutPrefix(ev.ID(), process+":")
				require.True(t, ok, "event id %q", ev.ID())
				r, ok := rows[id]
				require.True(t, ok, "event id %q", ev.ID())
				seen[id] = true
				require.Equal(t, "1.0", ev.SpecVersion())
				require.Equal(t, "inorder://"+process, ev.Source())
				require.Equal(t, "com.example.booking", ev.Type(), "bookings has no type column")
				require.Equal(t, r.key, ev.Subject())
				require.True(t, r.created.Equal(ev.Time()), "time %s, want %s", ev.Time(), r.created)
				require.Equal(t, "application/json", ev.DataContentType())
				var data struct {
					ID          json.Number `json:"id"`
					AggregateID string      `json:"aggregate_id"`
					Amount      float64     `json:"amount"`
				}
				require.NoError(t, json.Unmarshal(ev.Data(), &data))
				require.Equal(t, id, data.ID.String())
				require.Equal(t, r.key, data.AggregateID)
				require.Equal(t, 2.5, data.Amount)
			}
			require.Len(t, seen, n)
			t.Logf("%s mode: %d/%d events parsed by the CloudEvents SDK", mode, len(seen), n)
		})
	}
}
