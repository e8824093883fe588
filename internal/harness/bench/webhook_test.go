package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/webhook"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/harness/tcpproxy"
	"github.com/inorder-dev/inorder/processor"
)

// slowReceiver is a webhook receiver that answers 200 after latency, as a payment processor's API does
// after its own work.
func slowReceiver(tb testing.TB, latency time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(latency) // the receiver's own work
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// measureHTTPIdeal is the limit of a keyed stream to that receiver without inorder: clients goroutines,
// one per key, each sending its share of n requests one after another.
func measureHTTPIdeal(tb testing.TB, clients, n int, latency time.Duration) result {
	srv := slowReceiver(tb, latency)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = clients
	client := &http.Client{Transport: tr}
	body := []byte(`{"process":"bench","id":"1","record":{}}`)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func(share int) {
			defer wg.Done()
			for range share {
				resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(body))
				if err != nil {
					tb.Errorf("post: %v", err)
					return
				}
				resp.Body.Close()
			}
		}(n/clients + map[bool]int{true: 1}[c < n%clients])
	}
	wg.Wait()
	return result{n: n, elapsed: time.Since(start)}
}

// measureWebhook drains n events spread over keys through the signed webhook handler to a receiver
// answering after latency, with up to inFlight requests at once and a checkpoint per record advance.
func measureWebhook(tb testing.TB, inFlight, keys, n int, latency time.Duration) result {
	return measureWebhookVia(tb, nil, inFlight, keys, n, latency)
}

// measureWebhookVia is measureWebhook with the processor's database connections through proxy (nil:
// none); the requests to the receiver go around it.
func measureWebhookVia(tb testing.TB, proxy *tcpproxy.Proxy, inFlight, keys, n int, latency time.Duration) result {
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, `INSERT INTO events (aggregate_id, seq) SELECT 'k' || (g % $2), g FROM generate_series(1, $1) g`, n, keys)
	db.Exec(tb, "VACUUM ANALYZE events")
	lastID, lastAt := lastRow(tb, db, "events")
	srv := slowReceiver(tb, latency)
	h, err := webhook.New[handlers.Row](webhook.Config{URL: srv.URL, Secret: []byte("bench-secret")})
	if err != nil {
		tb.Fatalf("webhook: %v", err)
	}
	return drainVia(tb, db, proxy, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     "bench_webhook",
		Source:      inordertype.Source{Table: "events", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		Checkpoint:  processor.CheckpointRecord,
	}, n, lastID, lastAt, 3*time.Minute).result
}

// measureWebhookParking drains n events over keys as measureWebhook does, with OnHaltPark, to a receiver
// that refuses (400) every record of key k0 when refusing is set, and returns the rate of the other keys'
// records: with the refusing key parked, they should go at the speed they go when no key refuses.
func measureWebhookParking(tb testing.TB, refusing bool, inFlight, keys, n int, latency time.Duration) result {
	db := pgtest.New(tb)
	db.Exec(tb, eventsDDL)
	pgtest.AddClock(tb, db, "events")
	db.Exec(tb, `INSERT INTO events (aggregate_id, seq) SELECT 'k' || (g % $2), g FROM generate_series(1, $1) g`, n, keys)
	db.Exec(tb, "VACUUM ANALYZE events")
	lastID, lastAt := lastRow(tb, db, "events")
	var others int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM events WHERE aggregate_id <> 'k0'").
		Scan(&others); err != nil {
		tb.Fatalf("count: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Key string `json:"key"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(latency) // the receiver's own work
		if refusing && body.Key == "k0" {
			http.Error(w, "account closed", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(srv.Close)
	h, err := webhook.New[handlers.Row](webhook.Config{URL: srv.URL, Secret: []byte("bench-secret")})
	if err != nil {
		tb.Fatalf("webhook: %v", err)
	}
	r := drain(tb, db, processor.Config[handlers.Row]{
		StartFrom:   inordertype.StartFromBeginning,
		Process:     "bench_parking",
		Source:      inordertype.Source{Table: "events", KeyColumn: "aggregate_id"},
		Handler:     h,
		MaxInFlight: inFlight,
		Checkpoint:  processor.CheckpointRecord,
		OnHalt:      processor.OnHaltPark,
	}, n, lastID, lastAt, 3*time.Minute)
	var parked int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inorder.parked").Scan(&parked); err != nil {
		tb.Fatalf("count parked: %v", err)
	}
	want := 0
	if refusing {
		want = n - others // every record of k0: its first refused, the rest behind it
	}
	if parked != want {
		tb.Fatalf("%d records parked, want %d (refusing %v)", parked, want, refusing)
	}
	return result{n: others, elapsed: r.elapsed}
}
