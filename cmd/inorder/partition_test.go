package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// receiver is a webhook sink. Its arrival order is the order of deliveries across instances: a partition
// moves to another instance only after its owner's last delivery was answered and its position committed.
type receiver struct {
	mu    sync.Mutex
	order []delivery
}

type delivery struct {
	ID  int64
	Key string
}

func newReceiver(t *testing.T) (*receiver, *httptest.Server) {
	r := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _ := strconv.ParseInt(body.ID, 10, 64)
		r.mu.Lock()
		r.order = append(r.order, delivery{id, body.Key})
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

// firstDeliveries returns, per key, the ids in the order they were first delivered, the number of rows
// delivered and the number of redeliveries.
func (r *receiver) firstDeliveries() (map[string][]int64, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[int64]bool{}
	perKey := map[string][]int64{}
	redelivered := 0
	for _, d := range r.order {
		if seen[d.ID] {
			redelivered++
			continue
		}
		seen[d.ID] = true
		perKey[d.Key] = append(perKey[d.Key], d.ID)
	}
	return perKey, len(seen), redelivered
}

func TestPartitionsAcrossTwoInstancesOneKilledHalfway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, stderr := runBinary(t, b.env, "migrate", "--partition-index", "bookings:aggregate_id:4")
	require.Zero(t, code, stderr)
	recv, srv := newReceiver(t)
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	args := runArgs("--partitions", "4", "--columns", "id,aggregate_id", "--handler", "webhook",
		"--webhook-url", srv.URL, "--webhook-secret-env", "INORDER_TEST_SECRET")
	first := startBinary(t, env, append(args, "--instance", "first")...)
	second := startBinary(t, env, append(args, "--instance", "second")...)
	book := func(n int) {
		b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount)
			SELECT 'customer-' || (g %% 9), 1 FROM generate_series(1, %d) g`, n))
	}
	delivered := func() int {
		_, n, _ := recv.firstDeliveries()
		return n
	}
	total := 0
	for i := 0; i < 5; i++ {
		book(20)
		total += 20
		require.Eventually(t, func() bool { return delivered() == total }, 20*time.Second, 10*time.Millisecond, first.logs()+second.logs())
	}
	require.NoError(t, first.cmd.Process.Kill()) // halfway: SIGKILL, no chance to unlock
	first.wait(t)
	for i := 0; i < 5; i++ {
		book(20)
		total += 20
	}
	require.Eventually(t, func() bool { return delivered() == total }, 30*time.Second, 10*time.Millisecond, second.logs())
	perKey, _, redelivered := recv.firstDeliveries()
	for key, ids := range perKey {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "key %s delivered out of order: %v", key, ids)
		}
	}
	require.LessOrEqual(t, redelivered, 4, "at most the record in flight of each of the killed instance's partitions")
	t.Logf("delivered %d rows, redelivered %d", total, redelivered)

	// Repartitioning is refused while the process runs or anything is behind, and done once drained.
	code, _, stderr = runBinary(t, b.env, "repartition", "--process", "booking_sms", "--partitions", "2", "--actor", "ops")
	require.Equal(t, 1, code)
	// Refused either because a partition is owned, or because one is changing hands right now.
	require.Contains(t, stderr, "stop every instance first")
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, second.wait(t))
	book(5)
	code, _, stderr = runBinary(t, b.env, "repartition", "--process", "booking_sms", "--partitions", "2", "--actor", "ops")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "rows behind; let it drain, then stop it, then repartition")

	drain := startBinary(t, env, args...)
	require.Eventually(t, func() bool { return delivered() == total+5 }, 20*time.Second, 10*time.Millisecond, drain.logs())
	require.NoError(t, drain.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, drain.wait(t))
	code, stdout, stderr := runBinary(t, b.env, "repartition", "--process", "booking_sms", "--partitions", "2",
		"--actor", "ops", "--reason", "fewer, busier instances")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "booking_sms now has 2 partitions")
	code, _, stderr = runBinary(t, b.env, "migrate", "--partition-index", "bookings:aggregate_id:2")
	require.Zero(t, code, stderr)

	after := startBinary(t, b.env, runArgs("--partitions", "2", "--columns", "id,aggregate_id")...)
	book(6)
	require.Eventually(t, func() bool { return len(after.output()) == 6 }, 20*time.Second, 10*time.Millisecond, after.logs())
	for _, l := range after.output() {
		var line struct{ Record struct{ ID int64 } }
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		require.Greater(t, line.Record.ID, int64(total+5), "only rows after the repartition: nothing delivered twice")
	}
	code, stdout, _ = runBinary(t, b.env, "audit", "--process", "booking_sms")
	require.Zero(t, code)
	require.True(t, strings.Contains(stdout, "repartition"), stdout)
}
