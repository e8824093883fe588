package ops_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/ops"
	"github.com/inorder-dev/inorder/processor"
)

// fetch gets url over HTTP and returns its status and body.
func fetch(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// samples reads url (a /metrics endpoint) and returns every sample by its series as printed:
// `inorder_halted{process="jobs"}`.
func samples(url string) (map[string]float64, error) {
	code, body, err := fetch(url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", url, code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			return nil, fmt.Errorf("sample line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("sample line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// scrape is samples for the test's own goroutine: it fails the test on error.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	s, err := samples(url)
	require.NoError(t, err)
	return s
}

// scraped is samples for conditions polled by require.Eventually (which runs them on a goroutine of its
// own, where the test must not be failed): nil on error, which no condition accepts.
func scraped(url string) map[string]float64 {
	s, _ := samples(url)
	return s
}

// series names a series of process "jobs".
func series(name string) string { return fmt.Sprintf(`%s{process="jobs"}`, name) }

// value returns the sample of name for process "jobs", failing when there is none.
func value(t *testing.T, samples map[string]float64, name string) float64 {
	t.Helper()
	v, ok := samples[series(name)]
	require.True(t, ok, "no series %s", series(name))
	return v
}

// is reports whether samples hold name for process "jobs" at v (a missing series is not zero).
func is(samples map[string]float64, name string, v float64) bool {
	got, ok := samples[series(name)]
	return ok && got == v
}

// documented are the series every tracked process has from the start.
var documented = []string{
	"inorder_records_handled_total", "inorder_handler_failures_total", "inorder_handler_duration_seconds_count",
	"inorder_batches_total", "inorder_records_read_total", "inorder_halted", "inorder_retrying", "inorder_horizon_hold_seconds",
	"inorder_cursor_locked", "inorder_position_timestamp_seconds", "inorder_connected", "inorder_lag_errors_total",
}

func TestMetricsDescribeAKnownRun(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t) // five rows
	db.Exec(t, "INSERT INTO jobs SELECT FROM generate_series(1, 5)")
	const n = 10

	// Record 4 fails twice; its third attempt waits until the test has seen the halt.
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[int64]int{}
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 100*time.Millisecond
	cfg.Handler = handlers.HandlerFunc[row](func(ctx context.Context, rec *handlers.Record[row]) error {
		mu.Lock()
		calls[rec.Value.ID]++
		c := calls[rec.Value.ID]
		mu.Unlock()
		if rec.Value.ID == 4 {
			switch c {
			case 1, 2:
				return fmt.Errorf("attempt %d fails", c)
			case 3:
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	})
	m := ops.NewMetrics()
	m.Track("jobs")
	cfg.Observer = m.Observer()
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)
	url := srv.URL + "/metrics"

	s := scrape(t, url)
	for _, name := range documented {
		require.Zero(t, value(t, s, name), name)
	}
	require.NotContains(t, s, series("inorder_lag_rows"), "no lag before it is measured")
	require.Contains(t, s, "go_goroutines", "the Go collector is registered")

	lagCtx, stopLag := context.WithCancel(context.Background())
	lagDone := make(chan error, 1)
	go func() { lagDone <- m.WatchLag(db.Pool, 20*time.Millisecond)(lagCtx) }()
	t.Cleanup(func() { stopLag(); require.NoError(t, <-lagDone) })

	p, err := processor.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})

	require.Eventually(t, func() bool {
		s := scraped(url)
		return is(s, "inorder_retrying", 1) && is(s, "inorder_handler_failures_total", 2)
	}, 20*time.Second, 10*time.Millisecond, "the stream retries record 4 after two failures")
	s = scrape(t, url)
	require.Equal(t, 0.0, value(t, s, "inorder_halted"), "failing for less than HaltAfter is retrying, not halted")
	require.Equal(t, 3.0, value(t, s, "inorder_records_handled_total"), "records 1-3 went through")
	require.Equal(t, 1.0, value(t, s, "inorder_cursor_locked"))
	close(release)

	require.Eventually(t, func() bool {
		s := scraped(url)
		return is(s, "inorder_records_handled_total", n) && is(s, "inorder_lag_rows", 0) &&
			is(s, "inorder_halted", 0) && is(s, "inorder_retrying", 0)
	}, 20*time.Second, 10*time.Millisecond, "every record is handled and the lag measured at zero")
	var last time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT max(coalesce(inorder_at, created_at)) FROM jobs").Scan(&last))
	s = scrape(t, url)
	require.Equal(t, 2.0, value(t, s, "inorder_handler_failures_total"))
	require.Equal(t, float64(n+2), value(t, s, "inorder_handler_duration_seconds_count"), "every call is timed")
	require.Equal(t, float64(n+2), s[`inorder_handler_duration_seconds_bucket{process="jobs",le="+Inf"}`])
	require.Contains(t, s, `inorder_handler_duration_seconds_bucket{process="jobs",le="0.001"}`)
	require.Contains(t, s, `inorder_handler_duration_seconds_bucket{process="jobs",le="30"}`)
	require.GreaterOrEqual(t, value(t, s, "inorder_batches_total"), 3.0, "the halt made the stream read again")
	require.GreaterOrEqual(t, value(t, s, "inorder_records_read_total"), float64(n+2))
	require.Equal(t, 0.0, value(t, s, "inorder_halted"))
	require.Equal(t, 1.0, value(t, s, "inorder_cursor_locked"), "the running processor owns the process")
	require.Equal(t, 1.0, value(t, s, "inorder_connected"))
	require.Equal(t, 0.0, value(t, s, "inorder_horizon_hold_seconds"), "no writer was in flight")
	require.InDelta(t, float64(last.UnixNano())/1e9, value(t, s, "inorder_position_timestamp_seconds"), 1e-6,
		"the position is the last row's time by the table's insert clock")
	require.Equal(t, 0.0, value(t, s, "inorder_lag_seconds"))
	require.Equal(t, 0.0, value(t, s, "inorder_lag_errors_total"))

	// Stopped, the instance owns nothing; rows inserted meanwhile show as lag.
	cancel()
	require.NoError(t, <-done)
	stopped = true
	require.Equal(t, 0.0, value(t, scrape(t, url), "inorder_cursor_locked"))
	db.Exec(t, "INSERT INTO jobs SELECT FROM generate_series(1, 5)")
	require.Eventually(t, func() bool {
		s := scraped(url)
		return is(s, "inorder_lag_rows", 5) && s[series("inorder_lag_seconds")] > 0
	}, 20*time.Second, 10*time.Millisecond, "five rows behind, the oldest of some age")
	require.Equal(t, float64(n), value(t, scrape(t, url), "inorder_records_handled_total"))
}

func TestLagErrorsAreCountedAndTheGaugesKept(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	cfg.Handler = handlers.HandlerFunc[row](func(context.Context, *handlers.Record[row]) error { return nil })
	m := ops.NewMetrics()
	cfg.Observer = m.Observer()
	p, err := processor.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)

	lagCtx, stopLag := context.WithCancel(context.Background())
	lagDone := make(chan error, 1)
	go func() { lagDone <- m.WatchLag(db.Pool, 20*time.Millisecond)(lagCtx) }()
	t.Cleanup(func() { stopLag(); require.NoError(t, <-lagDone) })
	require.Eventually(t, func() bool {
		s := scraped(srv.URL + "/metrics")
		return is(s, "inorder_records_handled_total", 5) && is(s, "inorder_lag_rows", 0)
	}, 20*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	// The source goes away: the measurement fails, is counted, and the last lag stays.
	db.Exec(t, "DROP TABLE jobs")
	require.Eventually(t, func() bool {
		return scraped(srv.URL + "/metrics")[series("inorder_lag_errors_total")] >= 2
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, value(t, scrape(t, srv.URL+"/metrics"), "inorder_lag_rows"))
}

// TestParkedKeysAreMeasured: with a key parked, the parked series say how many keys and records, and since
// when; after a redrive they fall to zero.
func TestParkedKeysAreMeasured(t *testing.T) {
	t.Parallel()
	db, cfg := setup(t)
	db.Exec(t, "ALTER TABLE jobs ADD COLUMN k text NOT NULL DEFAULT 'a'")
	var refuse atomic.Bool
	refuse.Store(true)
	cfg.Source.KeyColumn = "k"
	cfg.OnHalt = processor.OnHaltPark
	cfg.Handler = handlers.HandlerFunc[row](func(_ context.Context, rec *handlers.Record[row]) error {
		if refuse.Load() && rec.Value.ID == 2 {
			return handlers.Permanent(errors.New("400 Bad Request"))
		}
		return nil
	})
	m := ops.NewMetrics()
	cfg.Observer = m.Observer()
	m.Track("jobs")
	p, err := processor.New(cfg)
	require.NoError(t, err)
	testrun.Start(t, p.Run)
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)
	testrun.Start(t, m.WatchLag(db.Pool, 20*time.Millisecond))

	require.Eventually(t, func() bool {
		s := scraped(srv.URL + "/metrics")
		return is(s, "inorder_parked_keys", 1) && is(s, "inorder_parked_records", 4) && s[series("inorder_parked_oldest_seconds")] > 0
	}, 20*time.Second, 10*time.Millisecond)
	refuse.Store(false)
	_, err = cursor.Redrive(context.Background(), db.Pool, "jobs", cursor.RedriveOpts{All: true,
		ActionOpts: cursor.ActionOpts{Actor: "test", Reason: "accepted again"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := scraped(srv.URL + "/metrics")
		return is(s, "inorder_parked_keys", 0) && is(s, "inorder_parked_records", 0) && is(s, "inorder_parked_oldest_seconds", 0)
	}, 20*time.Second, 10*time.Millisecond)
}

// TestBuildInfoIsOneSeries serves a fresh Metrics: inorder_build_info is one series at 1 with the Go
// version, and SetVersion replaces its version label rather than adding a series.
func TestBuildInfoIsOneSeries(t *testing.T) {
	t.Parallel()
	m := ops.NewMetrics()
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)
	buildInfo := func() map[string]float64 {
		out := map[string]float64{}
		for k, v := range scrape(t, srv.URL+"/metrics") {
			if strings.HasPrefix(k, "inorder_build_info{") {
				out[k] = v
			}
		}
		return out
	}
	require.Equal(t, map[string]float64{
		`inorder_build_info{goversion="` + runtime.Version() + `",revision="",version="devel"}`: 1,
	}, buildInfo(), "a test binary records no version of its own")
	m.SetVersion("v0.1.0")
	require.Equal(t, map[string]float64{
		`inorder_build_info{goversion="` + runtime.Version() + `",revision="",version="v0.1.0"}`: 1,
	}, buildInfo())
}

// TestSourceWaitingNamesTheColumn: the process's one inorder_source_waiting series names the column its
// stream waits for while it waits, and none once it reads again.
func TestSourceWaitingNamesTheColumn(t *testing.T) {
	t.Parallel()
	m := ops.NewMetrics()
	srv := httptest.NewServer(ops.NewHandler(m, nil))
	t.Cleanup(srv.Close)
	waiting := func() map[string]float64 {
		out := map[string]float64{}
		for k, v := range scrape(t, srv.URL+"/metrics") {
			if strings.HasPrefix(k, "inorder_source_waiting{") {
				out[k] = v
			}
		}
		return out
	}
	m.Observer().Batch("jobs", 0)
	require.Equal(t, map[string]float64{`inorder_source_waiting{column="",process="jobs"}`: 0}, waiting())
	m.Observer().SourceWaiting("jobs", "payload", true)
	require.Equal(t, map[string]float64{`inorder_source_waiting{column="payload",process="jobs"}`: 1}, waiting())
	m.Observer().SourceWaiting("jobs", "created_at", true)
	require.Equal(t, map[string]float64{`inorder_source_waiting{column="created_at",process="jobs"}`: 1}, waiting())
	m.Observer().SourceWaiting("jobs", "", false)
	require.Equal(t, map[string]float64{`inorder_source_waiting{column="",process="jobs"}`: 0}, waiting())
}
