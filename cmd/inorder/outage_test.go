package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestASinkRefusingEveryRecordIsAnOutageNotAPoisonRecord: a receiver that answers 404 (a mistyped URL) or
// 401 (a revoked key) to every request for 20 s, with --on-halt park and a window of 16 over 300 rows of
// 20 customers. No key is parked and the stream never counts as halted; status says the sink is
// unavailable and what to check, and never suggests a skip. Once the receiver accepts, every row is
// delivered once, in order per customer, with no operator action.
func TestASinkRefusingEveryRecordIsAnOutageNotAPoisonRecord(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code  int
		check string
	}{{http.StatusNotFound, "the URL"}, {http.StatusUnauthorized, "the credentials"}} {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const customers, total, outage = 20, 300, 20 * time.Second
			var mu sync.Mutex
			accepting := false
			refused := map[string]bool{} // customers whose records were refused
			var got []delivery
			srv := httptest.NewServer(deliveries(func(w http.ResponseWriter, d delivery) {
				mu.Lock()
				defer mu.Unlock()
				if !accepting {
					refused[d.Key] = true
					http.Error(w, http.StatusText(tt.code), tt.code)
					return
				}
				got = append(got, d)
			}))
			t.Cleanup(srv.Close)
			b.db.Exec(t, fmt.Sprintf(`INSERT INTO bookings (aggregate_id, amount)
				SELECT 'customer-' || (g %% %d), 1 FROM generate_series(1, %d) g`, customers, total))
			env := append(append([]string{}, b.env...), "INORDER_TEST_SECRET=s3cret")
			p := startBinary(t, env, runArgs("--columns", "id,aggregate_id", "--handler", "webhook", "--webhook-url", srv.URL,
				"--webhook-secret-env", "INORDER_TEST_SECRET", "--webhook-max-in-flight", "16", "--on-halt", "park",
				"--retry-max", "1s")...)

			// Throughout the outage: never halted, never a key parked; status says what to check.
			began := time.Now()
			sawUnavailable := false
			for time.Since(began) < outage {
				code, out, errOut := runBinary(t, b.env, "status", "--json")
				require.Zero(t, code, errOut)
				var rep statusDoc
				require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
				if len(rep.Processes) == 0 {
					continue // not registered yet
				}
				require.Len(t, rep.Processes, 1)
				ps := rep.Processes[0]
				require.NotEqual(t, "halted", ps.State, out)
				require.Nil(t, ps.Parked, out)
				var parked int
				require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inorder.parked").Scan(&parked))
				require.Zero(t, parked, "no key parked for the sink's outage")
				if ps.State == "sink unavailable" {
					require.NotNil(t, ps.Halt, out)
					require.NotNil(t, ps.Halt.Unavailable, out)
					require.Contains(t, *ps.Halt.Unavailable, tt.check)
					require.Nil(t, ps.Halt.HaltedAt, out)
					sawUnavailable = true
				}
			}
			require.True(t, sawUnavailable, "status said the sink is unavailable")
			mu.Lock()
			require.Greater(t, len(refused), 1, "the window sent records of several customers during the outage")
			mu.Unlock()
			code, text, errOut := runBinary(t, b.env, "status")
			require.Zero(t, code, errOut)
			require.Contains(t, text, "sink unavailable")
			require.Contains(t, text, "check: "+tt.check)
			require.NotContains(t, text, "inorder skip", "a skip would not help")
			require.Contains(t, p.logs(), `"message":"the sink is unavailable:`)
			require.Equal(t, 1, strings.Count(p.logs(), `"message":"the sink is unavailable:`), "one line when it begins")

			mu.Lock()
			accepting = true
			mu.Unlock()
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) >= total
			}, 60*time.Second, 20*time.Millisecond, p.logs())
			require.Eventually(t, func() bool {
				return strings.Contains(p.logs(), `"message":"the sink accepts again: its outage is over, and the stream flows"`)
			}, 20*time.Second, 20*time.Millisecond, "one line when it ends")
			mu.Lock()
			defer mu.Unlock()
			seen := map[int64]bool{}
			last := map[string]int64{}
			for _, d := range got {
				require.False(t, seen[d.ID], "record %d delivered once after the outage", d.ID)
				seen[d.ID] = true
				require.Greater(t, d.ID, last[d.Key], "in order for %s", d.Key)
				last[d.Key] = d.ID
			}
			require.Len(t, seen, total)
		})
	}
}
