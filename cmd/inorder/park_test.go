package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAParkedKeyLetsTheOtherCustomersThrough runs the real binary with --on-halt park and a webhook window
// of 16 over 50 customers, against a receiver that refuses (400) every record of 2 customers after their
// 10th. The other 48 customers get all their records, in order and once; the 2 get their first 10 and
// nothing after, their later records parked. Once the receiver accepts them, `inorder redrive --all`
// delivers every parked record once, in order per customer.
func TestAParkedKeyLetsTheOtherCustomersThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const customers, total = 50, 2000
	closed := map[string]bool{"customer-7": true, "customer-31": true}
	var mu sync.Mutex
	accepting := false
	seen := map[string]int{} // records of a customer the receiver accepted
	var got []delivery       // every accepted request, in order
	sentAfterRefusal := 0    // requests for a closed customer's record after its first refusal
	refused := map[string]bool{}
	srv := httptest.NewServer(deliveries(func(w http.ResponseWriter, d delivery) {
		mu.Lock()
		defer mu.Unlock()
		if closed[d.Key] && !accepting && seen[d.Key] >= 10 {
			if refused[d.Key] {
				sentAfterRefusal++
			}
			refused[d.Key] = true
			http.Error(w, "account closed", http.StatusBadRequest)
			return
		}
		seen[d.Key]++
		got = append(got, d)
	}))
	t.Cleanup(srv.Close)
	b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount)
		SELECT 'customer-' || (g %% %d), 1 FROM generate_series(1, %d) g`, customers, total))
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	p := startBinary(t, env, runArgs("--columns", "id,aggregate_id", "--handler", "webhook", "--webhook-url", srv.URL,
		"--webhook-secret-env", "INORDER_TEST_SECRET", "--webhook-max-in-flight", "16", "--on-halt", "park")...)

	perCustomer := total / customers
	accepted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	require.Eventually(t, func() bool { return accepted() == total-2*(perCustomer-10) }, 60*time.Second,
		10*time.Millisecond, p.logs())
	code, out, errOut := runBinary(t, b.env, "parked", "--process", "booking_sms", "--json")
	require.Zero(t, code, errOut)
	var parked struct {
		Keys []struct {
			Key     string `json:"key"`
			Records int    `json:"records"`
			Status  int    `json:"status"`
			Error   string `json:"error"`
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &parked), out)
	require.Len(t, parked.Keys, 2)
	for _, k := range parked.Keys {
		require.True(t, closed[k.Key], k.Key)
		require.Equal(t, perCustomer-10, k.Records)
		require.Equal(t, http.StatusBadRequest, k.Status)
	}
	code, out, _ = runBinary(t, b.env, "status")
	require.Zero(t, code)
	require.Contains(t, out, fmt.Sprintf("2 keys parked (%d records)", 2*(perCustomer-10)))
	code, out, _ = runBinary(t, b.env, "status", "--json")
	require.Zero(t, code)
	var doc statusDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Len(t, doc.Processes, 1)
	parkedDoc := doc.Processes[0].Parked
	require.NotNil(t, parkedDoc, "status --json says what is parked")
	require.Equal(t, 2, parkedDoc.Keys)
	require.Equal(t, 2*(perCustomer-10), parkedDoc.Records)
	require.NotEmpty(t, parkedDoc.OldestRecordID)

	mu.Lock()
	require.Zero(t, sentAfterRefusal, "a parked customer's later record was sent")
	accepting = true
	mu.Unlock()
	code, out, errOut = runBinary(t, b.env, "redrive", "--process", "booking_sms", "--all", "--actor", "test")
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprintf("2 keys redriven (%d records)", 2*(perCustomer-10)))
	require.Eventually(t, func() bool { return accepted() == total }, 60*time.Second, 10*time.Millisecond, p.logs())

	mu.Lock()
	defer mu.Unlock()
	perKey := map[string][]int64{}
	for _, d := range got {
		perKey[d.Key] = append(perKey[d.Key], d.ID)
	}
	require.Len(t, perKey, customers)
	for key, ids := range perKey {
		require.Len(t, ids, perCustomer, "customer %s: every record once", key)
		require.True(t, slices.IsSorted(ids), "customer %s out of order: %v", key, ids)
	}
	code, out, _ = runBinary(t, b.env, "parked", "--process", "booking_sms")
	require.Zero(t, code)
	require.Contains(t, out, "no key is parked")
	code, out, _ = runBinary(t, b.env, "status", "--json")
	require.Zero(t, code)
	doc = statusDoc{}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Nil(t, doc.Processes[0].Parked, "parked is null once nothing is")
}

// TestSIGKILLDuringARedriveLosesNothing parks a customer with 200 records, redrives it against a slow
// receiver, kills the instance with SIGKILL in the middle, and starts another: it goes on with the
// redrive. Every record arrives, first deliveries in order, at most the record in flight delivered again,
// and nothing is left parked.
func TestSIGKILLDuringARedriveLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	refuse := true
	var got []delivery
	srv := httptest.NewServer(deliveries(func(w http.ResponseWriter, d delivery) {
		mu.Lock()
		no := refuse && d.Key == "customer-0"
		mu.Unlock()
		if no {
			http.Error(w, "account closed", http.StatusBadRequest)
			return
		}
		if d.Key == "customer-0" {
			time.Sleep(3 * time.Millisecond) // slow enough to be killed mid-redrive
		}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	b.db.Exec(t, `INSERT INTO bookings (aggregate_id, amount) SELECT 'customer-' || (g % 2), 1 FROM generate_series(1, 400) g`)
	env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
	args := runArgs("--columns", "id,aggregate_id", "--handler", "webhook", "--webhook-url", srv.URL,
		"--webhook-secret-env", "INORDER_TEST_SECRET", "--on-halt", "park")
	count := func(key string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range got {
			if d.Key == key {
				n++
			}
		}
		return n
	}
	first := startBinary(t, env, args...)
	require.Eventually(t, func() bool { return count("customer-1") == 200 }, 30*time.Second, 10*time.Millisecond, first.logs())
	mu.Lock()
	refuse = false
	mu.Unlock()
	code, _, errOut := runBinary(t, b.env, "redrive", "--process", "booking_sms", "--key", "customer-0", "--actor", "test")
	require.Zero(t, code, errOut)
	require.Eventually(t, func() bool { return count("customer-0") >= 60 }, 30*time.Second, 5*time.Millisecond, first.logs())
	require.NoError(t, first.cmd.Process.Kill())
	first.wait(t)
	killedAt := count("customer-0")
	require.Less(t, killedAt, 200, "killed before the redrive ended")

	second := startBinary(t, env, args...)
	require.Eventually(t, func() bool {
		code, out, _ := runBinary(t, b.env, "parked", "--process", "booking_sms")
		return code == 0 && strings.Contains(out, "no key is parked")
	}, 60*time.Second, 20*time.Millisecond, second.logs())
	mu.Lock()
	defer mu.Unlock()
	seen := map[int64]bool{}
	var firsts []int64
	again := 0
	for _, d := range got {
		if d.Key != "customer-0" {
			continue
		}
		if seen[d.ID] {
			again++
			continue
		}
		seen[d.ID] = true
		firsts = append(firsts, d.ID)
	}
	require.Len(t, firsts, 200, "every record of the key")
	require.True(t, slices.IsSorted(firsts), "first deliveries in order")
	require.LessOrEqual(t, again, 1, "at most the record in flight delivered again")
	t.Logf("killed after %d of 200 redriven records; %d delivered again", killedAt, again)
}

// deliveries is a webhook receiver that decodes each request's record id and key and hands them to serve,
// which answers.
func deliveries(serve func(w http.ResponseWriter, d delivery)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct{ ID, Key string }
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, err := strconv.ParseInt(body.ID, 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		serve(w, delivery{ID: id, Key: body.Key})
	})
}
