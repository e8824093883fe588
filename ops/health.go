package ops

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// defaultPingTimeout bounds Health's database check when HealthConfig.PingTimeout is zero.
const defaultPingTimeout = 2 * time.Second

// HealthConfig configures a Health.
type HealthConfig struct {
	// Ping checks that the database answers; the Ping of the program's processor.Client's pool
	// (Client.Pool) fits. Nil skips the check.
	Ping func(ctx context.Context) error
	// PingTimeout bounds one check. Zero means 2 s.
	PingTimeout time.Duration
	// Metrics, when set, tells which processors are connected: every process it tracks (see
	// Metrics.Track) must be, for the program to be ready. Nil checks the database only.
	Metrics *Metrics
}

// Health answers liveness and readiness probes:
//
//   - GET /healthz is 200 "ok" while the program runs.
//   - GET /readyz is 200 "ready" when the database answers a ping and every tracked processor is
//     connected, and 503 otherwise, with one line per problem after "not ready":
//     "database: <error>", "process <name>: starting (not connected yet)" or
//     "process <name>: reconnecting". A processor standing by because another instance owns its process is
//     connected, so ready: it takes over when the owner goes away.
//
// Any other path is 404.
type Health struct {
	cfg HealthConfig
}

// NewHealth returns a Health checking what cfg names.
func NewHealth(cfg HealthConfig) *Health {
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = defaultPingTimeout
	}
	return &Health{cfg: cfg}
}

// Check returns what keeps the program from being ready, one line per problem; none means ready.
func (h *Health) Check(ctx context.Context) []string {
	var problems []string
	if h.cfg.Ping != nil {
		pctx, cancel := context.WithTimeout(ctx, h.cfg.PingTimeout)
		err := h.cfg.Ping(pctx)
		cancel()
		if err != nil {
			problems = append(problems, "database: "+oneLine(err.Error()))
		}
	}
	if h.cfg.Metrics != nil {
		problems = append(problems, h.cfg.Metrics.notConnected()...)
	}
	return problems
}

// ServeHTTP serves /healthz and /readyz.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/healthz":
		_, _ = fmt.Fprintln(w, "ok")
	case "/readyz":
		problems := h.Check(r.Context())
		if len(problems) == 0 {
			_, _ = fmt.Fprintln(w, "ready")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready\n%s\n", strings.Join(problems, "\n"))
	default:
		http.NotFound(w, r)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// NewHandler serves /metrics from m and /healthz and /readyz from h on one listener, for
// lifecycle.Group.AddHTTPServer. Either may be nil, leaving its paths out (404).
func NewHandler(m *Metrics, h *Health) http.Handler {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("/metrics", m.handler())
	}
	if h != nil {
		mux.Handle("/healthz", h)
		mux.Handle("/readyz", h)
	}
	return mux
}
