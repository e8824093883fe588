package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/processor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// fast shortens the processor's timings for tests.
func fast(cfg *processor.Config[handlers.Row]) {
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryMin = 20 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
}

// start runs the example until the test ends; Stop ends it early and returns what run returned.
func start(t *testing.T, databaseURL string, psp *paymentProcessor, log zerolog.Logger) *processortest.Running {
	t.Helper()
	return processortest.Start(t, processortest.RunFunc(func(ctx context.Context) error {
		return run(ctx, databaseURL, psp, log, fast)
	}), nil)
}

// newPSP returns a payment processor on db, closed when the test ends.
func newPSP(t *testing.T, db *processortest.DB, secret []byte) *paymentProcessor {
	t.Helper()
	psp, err := newPaymentProcessor(context.Background(), db.URL, secret, zerolog.New(zerolog.NewTestWriter(t)))
	require.NoError(t, err)
	t.Cleanup(psp.Close)
	return psp
}

func chargesMade(t *testing.T, psp *paymentProcessor) []charge {
	t.Helper()
	charges, err := psp.chargesMade(context.Background())
	require.NoError(t, err)
	return charges
}

// TestChargesEveryEventOnceInOrder records events for several customers, before and while the example
// runs, and loses the response to one charge so that the event is delivered again. Every event must be
// charged exactly once, each customer's in sequence, and the redelivered one must not be charged twice.
func TestChargesEveryEventOnceInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := processortest.NewDB(t, nil)
	require.NoError(t, setup(ctx, db.URL))
	log := zerolog.New(zerolog.NewTestWriter(t))
	psp := newPSP(t, db, []byte("test-secret"))

	customers := []string{"cus_a", "cus_b", "cus_c", "cus_d"}
	var ids []int64
	for _, c := range customers {
		for i := range 3 {
			kind := "usage"
			if i == 0 {
				kind = "booking"
			}
			id, err := recordEvent(ctx, db.Pool, c, kind, int64(100*(i+1)))
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	// cus_b's 5th event is recorded while the example runs; the payment processor charges it and then
	// answers 500, as if the response had been lost.
	psp.loseFirstResponse("cus_b", 5)

	example := start(t, db.URL, psp, log)

	// Every customer records five more events concurrently with the delivery, two writers each.
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range customers {
		for range 2 {
			wg.Go(func() {
				for i := range 5 {
					id, err := recordEvent(ctx, db.Pool, c, "usage", int64(10+i))
					mu.Lock()
					errs, ids = append(errs, err), append(ids, id)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	total := len(ids)

	require.Eventually(t, func() bool { return len(chargesMade(t, psp)) >= total }, 30*time.Second, 10*time.Millisecond,
		"waiting for %d charges", total)
	require.NoError(t, example.Stop())

	charges := chargesMade(t, psp)
	require.Len(t, charges, total, "every event is charged exactly once")
	require.Empty(t, psp.refusals(), "no request was refused: none was forged, out of order or a gap")
	byEvent := map[string]bool{}
	next := map[string]int64{}
	for _, c := range charges {
		id := strings.TrimPrefix(c.Key, process+":")
		require.False(t, byEvent[id], "event %s charged twice", id)
		byEvent[id] = true
		next[c.Customer]++
		require.Equal(t, next[c.Customer], c.Seq, "customer %s charged out of sequence", c.Customer)
	}
	for _, id := range ids {
		require.True(t, byEvent[fmt.Sprint(id)], "event %d never charged", id)
	}
	for _, c := range customers {
		require.EqualValues(t, 3+10, next[c], "charges of %s", c)
	}

	// The event whose response was lost went out twice and was charged once.
	var lostID int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id FROM billing_events WHERE customer_id = 'cus_b' AND seq = 5").Scan(&lostID))
	key := fmt.Sprintf("%s:%d", process, lostID)
	require.Equal(t, 2, psp.requestsFor(key), "the event whose response was lost is delivered again")
	n := 0
	for _, c := range charges {
		if c.Key == key {
			n++
		}
	}
	require.Equal(t, 1, n, "the redelivered event is charged once")

	// The stream went through the failure: it is not halted, and its position is the last event.
	var posID string
	var halted *string
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT p.position_id, c.halted_record_id FROM inorder.cursor AS c JOIN inorder.position AS p USING (process_name)
		WHERE process_name = $1`, process).Scan(&posID, &halted))
	require.Nil(t, halted)
	var lastID string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id::text FROM billing_events ORDER BY coalesce(inorder_at, created_at) DESC, id DESC LIMIT 1").Scan(&lastID))
	require.Equal(t, lastID, posID)
}

// TestPaymentProcessorRefusesWhatItMust checks that the fake payment processor is no pushover: a forged
// signature and an event that skips ahead are refused and charge nothing, and a repeated key is
// acknowledged without a second charge. Without this, the test above could pass against a receiver that
// checks nothing.
func TestPaymentProcessorRefusesWhatItMust(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("test-secret")
	psp := newPSP(t, processortest.NewDB(t, nil), secret)
	url, stopPSP, err := psp.start()
	require.NoError(t, err)
	t.Cleanup(stopPSP)

	send := func(secret []byte, id string, seq int64) error {
		h, err := webhook.New[handlers.Row](webhook.Config{URL: url, Secret: secret})
		require.NoError(t, err)
		return h.Handle(ctx, &handlers.Record[handlers.Row]{
			Process: process, ID: id, CreatedAt: time.Now(), Key: "cus_x", Attempt: 1,
			Value: handlers.Row{
				Columns: []string{"id", "customer_id", "seq", "kind", "amount_cents"},
				Values:  []any{id, "cus_x", seq, "usage", int64(100)},
			},
		})
	}
	status := func(err error) int {
		var serr *webhook.StatusError
		require.ErrorAs(t, err, &serr)
		return serr.StatusCode
	}

	require.Equal(t, http.StatusUnauthorized, status(send([]byte("forged"), "1", 1)))
	require.Equal(t, http.StatusConflict, status(send(secret, "2", 2)), "seq 2 before seq 1")
	require.True(t, handlers.IsPermanent(send(secret, "2", 2)), "a 409 halts the stream for good")
	require.NoError(t, send(secret, "1", 1))
	require.NoError(t, send(secret, "1", 1), "a redelivery is acknowledged")
	require.NoError(t, send(secret, "2", 2))
	require.Len(t, chargesMade(t, psp), 2)
	require.Len(t, psp.refusals(), 3)
}

// TestRestartGoesOnWhereItStopped stops the example and starts it again, with a payment processor that
// has only its stored charges to go by, as after a restart of the program. The events recorded in
// between must be charged once each, every customer's sequence going on where it stopped.
func TestRestartGoesOnWhereItStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := processortest.NewDB(t, nil)
	require.NoError(t, setup(ctx, db.URL))
	log := zerolog.New(zerolog.NewTestWriter(t))
	secret := []byte("test-secret")
	record := func(n int) {
		for _, c := range []string{"cus_a", "cus_b"} {
			for range n {
				_, err := recordEvent(ctx, db.Pool, c, "usage", 5)
				require.NoError(t, err)
			}
		}
	}

	first := newPSP(t, db, secret)
	record(4)
	example := start(t, db.URL, first, log)
	require.Eventually(t, func() bool { return len(chargesMade(t, first)) == 8 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, example.Stop())

	record(3)
	second := newPSP(t, db, secret)
	example = start(t, db.URL, second, log)
	record(3)
	require.Eventually(t, func() bool { return len(chargesMade(t, second)) == 20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, example.Stop())

	require.Empty(t, first.refusals())
	require.Empty(t, second.refusals(), "the restarted payment processor saw every sequence go on")
	next := map[string]int64{}
	for _, c := range chargesMade(t, second) {
		next[c.Customer]++
		require.Equal(t, next[c.Customer], c.Seq, "customer %s charged out of sequence", c.Customer)
	}
	require.Equal(t, map[string]int64{"cus_a": 10, "cus_b": 10}, next)
}
