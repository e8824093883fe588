package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWindowLosesNothingOnSIGKILLAndSIGTERM runs the real binary with a window of 32 requests over 20
// keys to a receiver that answers in 0-20 ms, kills it with SIGKILL mid-window, stops the next one with
// SIGTERM mid-window, and lets a third finish: every record arrives, first deliveries in order per key,
// and each stop delivers again at most the window.
func TestWindowLosesNothingOnSIGKILLAndSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const window = 32
	recv := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct{ ID, Key string }
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the receiver's own latency
		id, _ := strconv.ParseInt(body.ID, 10, 64)
		recv.mu.Lock()
		recv.order = append(recv.order, delivery{id, body.Key})
		recv.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	args := runArgs("--columns", "id,aggregate_id", "--handler", "webhook", "--webhook-url", srv.URL,
		"--webhook-secret-env", "INORDER_TEST_SECRET", "--webhook-max-in-flight", strconv.Itoa(window))
	const total = 900
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount)
		SELECT 'customer-' || (g %% 20), 1 FROM generate_series(1, %d) g`, total))
	delivered := func() int {
		_, n, _ := recv.firstDeliveries()
		return n
	}

	first := startBinary(t, env, args...)
	require.Eventually(t, func() bool { return delivered() >= total/3 }, 30*time.Second, 5*time.Millisecond, first.logs())
	require.NoError(t, first.cmd.Process.Kill()) // mid-window: requests in flight, no chance to unlock
	first.wait(t)

	second := startBinary(t, env, args...)
	require.Eventually(t, func() bool { return delivered() >= 2*total/3 }, 30*time.Second, 5*time.Millisecond, second.logs())
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, second.wait(t), "SIGTERM mid-window: the records in flight finish, the prefix is made durable, exit 0")
	_, _, afterKill := recv.firstDeliveries() // what the second instance delivered again after the kill
	// Everything up to the durable position was delivered: the prefix holds no gap.
	pos, err := strconv.ParseInt(b.position(t), 10, 64)
	require.NoError(t, err)
	perKey, _, _ := recv.firstDeliveries()
	got := map[int64]bool{}
	for _, ids := range perKey {
		for _, id := range ids {
			got[id] = true
		}
	}
	for id := int64(1); id <= pos; id++ {
		require.True(t, got[id], "record %d is behind the durable position %d but was never delivered", id, pos)
	}

	third := startBinary(t, env, args...)
	require.Eventually(t, func() bool { return delivered() == total }, 30*time.Second, 10*time.Millisecond, third.logs())
	perKey, n, redelivered := recv.firstDeliveries()
	require.Equal(t, total, n)
	for key, ids := range perKey {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "key %s first delivered out of order: %v", key, ids)
		}
	}
	require.LessOrEqual(t, afterKill, window, "SIGKILL delivers again at most the window")
	require.LessOrEqual(t, redelivered, 2*window, "each stop delivers again at most the window")
	t.Logf("%d records over 20 keys, window %d: %d delivered again after a SIGKILL and a SIGTERM", total, window, redelivered)
}
