package ops

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/xmin"
	"github.com/inorder-dev/inorder/processor"
)

// durationBuckets are the buckets of inorder_handler_duration_seconds, from 1ms to 30s.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// defaultLagInterval is how often WatchLag measures the lag when given no interval.
const defaultLagInterval = 15 * time.Second

// A round of lag measurements is cut off after its interval, but never sooner than minLagTimeout nor later
// than maxLagTimeout.
const (
	minLagTimeout = 5 * time.Second
	maxLagTimeout = 30 * time.Second
	// lagPendingRetry is how soon WatchLag looks again at a process it could not measure yet.
	lagPendingRetry = time.Second
)

// Metrics keeps Prometheus series about the processors reporting to it, on a registry of its own. Set its
// Observer as processor.Config.Observer of every processor of the program (one Metrics serves any number
// of processes), serve Handler (or NewHandler), and run WatchLag for the lag series.
// It also remembers whether each processor is connected, for Health.
type Metrics struct {
	reg *prometheus.Registry

	handled, failures, batches, read, lagErrors *prometheus.CounterVec
	duration                                    *prometheus.HistogramVec
	halted, retrying, hold, locked, position    *prometheus.GaugeVec
	connected, unavailable, refused             *prometheus.GaugeVec
	lagRows, lagSeconds                         *prometheus.GaugeVec
	inFlight, inFlightOldest                    *prometheus.GaugeVec
	resent, passOvers                           *prometheus.CounterVec
	parkedKeys, parkedRecords, parkedOldest     *prometheus.GaugeVec
	tracking, late, filter                      *prometheus.GaugeVec
	// sourceWaiting is labelled by process and column: one series per process, whose column label names
	// what the stream waits for (see SourceWaiting).
	sourceWaiting *prometheus.GaugeVec

	// The database's xmin horizon, looked at with the lag: the longest hold past the threshold, one
	// series per holder past it, and the looks that failed. The series are the database's, not a
	// process's.
	xminHeld   prometheus.Gauge
	xminHolder *prometheus.GaugeVec
	xminErrors prometheus.Counter

	// buildInfo is the one inorder_build_info series, valued 1; revision is its label of that name.
	buildInfo *prometheus.GaugeVec
	revision  string

	mu    sync.Mutex
	procs map[string]*procMetrics
	xmin  *xmin.Watch // replaced by SetXminHoldAfter
	// xminSeries are the label values of the inorder_xmin_holder series the last look set.
	xminSeries map[[6]string]bool
}

// procMetrics are one process's series, resolved once, and its connection state.
type procMetrics struct {
	handled, failures, batches, read prometheus.Counter
	duration                         prometheus.Observer
	halted, retrying, hold, locked   prometheus.Gauge
	position, connected, unavailable prometheus.Gauge
	refused                          prometheus.Gauge
	inFlight, inFlightOldest         prometheus.Gauge
	resent, passOvers                prometheus.Counter

	// state is guarded by Metrics.mu.
	state connState
	// refusal is the refusal of the credentials the processor waits out, "" when none; guarded by Metrics.mu.
	refusal string
	// sourceColumn is the column label of the process's inorder_source_waiting series; guarded by
	// Metrics.mu.
	sourceColumn string
}

type connState int

const (
	stateStarting     connState = iota // tracked, not connected yet
	stateConnected                     // connected (owning the process or standing by)
	stateReconnecting                  // lost its connection
)

var (
	_ processor.Observer = (*observer)(nil)
)

// NewMetrics returns a Metrics with a fresh registry holding the inorder_* series and the Go runtime and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg:      prometheus.NewRegistry(),
		procs:    map[string]*procMetrics{},
		handled:  perProcessCounter("inorder_records_handled_total", "Records the handler took successfully."),
		failures: perProcessCounter("inorder_handler_failures_total", "Handler calls (or async results) that failed."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inorder_handler_duration_seconds",
			Help:    "Time of each handler call, success or failure (for an async handler, the wait on its result).",
			Buckets: durationBuckets,
		}, []string{"process"}),
		batches:        perProcessCounter("inorder_batches_total", "Reads of the source table, one per batch, empty ones included."),
		read:           perProcessCounter("inorder_records_read_total", "Records returned by reads of the source table."),
		halted:         perProcessGauge("inorder_halted", "1 while the stream is halted on a failing record (refused for good, or failing for longer than its halt-after threshold), else 0."),
		retrying:       perProcessGauge("inorder_retrying", "1 while the stream retries a failing record with backoff, before it counts as halted, else 0."),
		unavailable:    perProcessGauge("inorder_sink_unavailable", "1 while the stream waits for a sink that refuses what every record would meet (a wrong URL, a revoked key, a missing topic, a sink down), else 0: nothing is halted or parked for it."),
		hold:           perProcessGauge("inorder_horizon_hold_seconds", "How long the transaction holding the horizon back has been in flight; 0 when none."),
		locked:         perProcessGauge("inorder_cursor_locked", "1 while this instance owns the process, else 0."),
		position:       perProcessGauge("inorder_position_timestamp_seconds", "The time of the position as last advanced by this instance (its insert clock's, or created_at where the table is read by it), in Unix seconds; 0 until then."),
		connected:      perProcessGauge("inorder_connected", "1 while the processor has a working database connection, 0 while it is starting or reconnecting."),
		refused:        perProcessGauge("inorder_credentials_refused", "1 while the database refuses the credentials of a processor that had connected (a password rotated, a token expired): it reconnects until they are accepted, else 0."),
		lagRows:        perProcessGauge("inorder_lag_rows", "Committed source rows after the durable position, counted up to 1000000."),
		lagSeconds:     perProcessGauge("inorder_lag_seconds", "Age of the oldest source row after the durable position, by the database clock; 0 when none."),
		lagErrors:      perProcessCounter("inorder_lag_errors_total", "Lag measurements that failed."),
		inFlight:       perProcessGauge("inorder_in_flight", "Records a keyed window has handed to the handler and not yet settled."),
		inFlightOldest: perProcessGauge("inorder_in_flight_oldest_seconds", "How long the oldest record in flight has been; the position waits on it. 0 when none."),
		resent:         perProcessCounter("inorder_sink_resent_total", "Records this instance sent to the sink again after the sink had accepted them."),
		passOvers: perProcessCounter("inorder_filter_pass_overs_total", "Times a process with a filter moved its position past rows "+
			"the filter passes over, up to the horizon, without a handler call (inorder_records_handled_total counts the records delivered)."),
		filter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inorder_filter",
			Help: "1 for the filter (--where) a process's position was last recorded under, labelled where; 0, with where empty, for a process without one; measured with the lag.",
		}, []string{"process", "where"}),
		parkedKeys:    perProcessGauge("inorder_parked_keys", "Keys parked (--on-halt park): their records wait for a redrive; measured with the lag."),
		parkedRecords: perProcessGauge("inorder_parked_records", "Records parked behind their keys, the first failed ones included; measured with the lag."),
		parkedOldest:  perProcessGauge("inorder_parked_oldest_seconds", "How long the key parked longest has been parked; 0 when none."),
		tracking: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inorder_tracking",
			Help: "1 for the tracking a process's position was last recorded under (clock: inorder's insert clock; " +
				"writers or transactions: created_at, as opted in, which a created_at the application writes can defeat); measured with the lag.",
		}, []string{"process", "tracking"}),
		late: perProcessGauge("inorder_late_rows", "Rows found committed behind the position after the process passed them, "+
			"not delivered, since it was registered (none with the insert clock); measured with the lag."),
		sourceWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inorder_source_waiting",
			Help: "1 while the stream waits for its source table to fit again after a migration, labelled with the column it needs that was dropped or renamed " +
				"(empty when the table fails another check of start-up): add the column back, or rename it back; 0, with no column, while it reads. " +
				"Nothing is halted, skipped or parked for it, and it reads on by itself once the table fits.",
		}, []string{"process", "column"}),
		xminHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inorder_xmin_held_seconds",
			Help: "How long the database's xmin horizon (vacuum's) has been held by its longest holder, once past the threshold (1m by default); 0 otherwise. " +
				xmin.HoldCost + ".",
		}),
		xminHolder: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inorder_xmin_holder",
			Help: "One series per holder of the database's xmin horizon past the threshold, valued how long it has held it (at least, when its start is hidden): " +
				"kind (backend, standby, prepared transaction, replication slot), pid, database, user, application, and name (a prepared transaction's gid, a slot's name).",
		}, []string{"kind", "pid", "database", "user", "application", "name"}),
		xminErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inorder_xmin_errors_total", Help: "Looks at the holders of the database's xmin horizon that failed.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inorder_build_info",
			Help: "Always 1, labelled with the version of inorder, the Go version and the commit the program was built from.",
		}, []string{"version", "goversion", "revision"}),
		xmin: xmin.NewWatch(0),
	}
	version, revision := moduleVersion(debug.ReadBuildInfo())
	m.revision = revision
	m.buildInfo.WithLabelValues(version, runtime.Version(), revision).Set(1)
	m.reg.MustRegister(m.buildInfo, m.handled, m.failures, m.duration, m.batches, m.read, m.halted, m.retrying, m.hold, m.locked,
		m.unavailable, m.position, m.connected, m.refused, m.lagRows, m.lagSeconds, m.lagErrors, m.inFlight, m.inFlightOldest,
		m.resent, m.parkedKeys, m.parkedRecords, m.parkedOldest, m.tracking, m.late, m.sourceWaiting, m.filter, m.passOvers,
		m.xminHeld, m.xminHolder, m.xminErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetXminHoldAfter sets how long a holder may hold the database's xmin horizon before the xmin series
// name it (zero means xmin.DefaultHoldAfter, a minute). Set it before WatchLag starts: a change
// starts the watch afresh, which then times the holders whose start it cannot read from zero again.
func (m *Metrics) SetXminHoldAfter(d time.Duration) {
	m.mu.Lock()
	m.xmin = xmin.NewWatch(d)
	m.mu.Unlock()
}

// SetVersion sets the version label of inorder_build_info, for a program that stamps its own at build
// time, as the inorder command does (make build's -X main.version). Without it, the label is the version
// of the inorder module that the Go toolchain recorded in the program (a `go install ...@v0.1.0` build, or
// the version in a service's go.mod), or "devel".
func (m *Metrics) SetVersion(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version(), m.revision).Set(1)
}

// modulePath is the path of inorder's Go module.
const modulePath = "github.com/inorder-dev/inorder"

// moduleVersion returns the version of the inorder module in a program's build information ("devel" when
// the build recorded none, as `go build` in a clone without VCS stamping) and the commit the program was
// built from, where the build recorded one.
func moduleVersion(info *debug.BuildInfo, ok bool) (version, revision string) {
	version = "devel"
	if !ok {
		return version, ""
	}
	mod := &info.Main
	for _, d := range info.Deps {
		if d.Path == modulePath {
			mod = d
			if d.Replace != nil {
				mod = d.Replace
			}
		}
	}
	if mod.Path == modulePath && mod.Version != "" && mod.Version != "(devel)" {
		version = mod.Version
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return version, revision
}

// Registry returns the registry the series live on, for a program to add its own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// handler serves the registry in the Prometheus exposition format, for /metrics.
func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Track declares a process this program runs: its series are created at zero at once (so that, say, a
// failure counter exists before the first failure), Health counts it as not ready until its processor
// has connected, and WatchLag measures its lag. A process that reports without being tracked is tracked
// from its first report. Tracking a process twice does nothing.
func (m *Metrics) Track(process string) { m.proc(process) }

// proc returns the series of process, creating them on first use.
func (m *Metrics) proc(process string) *procMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.procs[process]; ok {
		return p
	}
	p := &procMetrics{
		handled:        m.handled.WithLabelValues(process),
		failures:       m.failures.WithLabelValues(process),
		duration:       m.duration.WithLabelValues(process),
		batches:        m.batches.WithLabelValues(process),
		read:           m.read.WithLabelValues(process),
		halted:         m.halted.WithLabelValues(process),
		retrying:       m.retrying.WithLabelValues(process),
		unavailable:    m.unavailable.WithLabelValues(process),
		hold:           m.hold.WithLabelValues(process),
		locked:         m.locked.WithLabelValues(process),
		position:       m.position.WithLabelValues(process),
		connected:      m.connected.WithLabelValues(process),
		refused:        m.refused.WithLabelValues(process),
		inFlight:       m.inFlight.WithLabelValues(process),
		inFlightOldest: m.inFlightOldest.WithLabelValues(process),
		resent:         m.resent.WithLabelValues(process),
		passOvers:      m.passOvers.WithLabelValues(process),
	}
	m.lagErrors.WithLabelValues(process) // at zero, like the others
	m.sourceWaiting.WithLabelValues(process, "").Set(0)
	m.procs[process] = p
	return p
}

// processes returns the tracked process names, sorted.
func (m *Metrics) processes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.procs))
	for n := range m.procs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// observer is the processor.Observer of a Metrics (see Metrics.Observer): the methods a processor reports
// through, kept off the Metrics that a program handles.
type observer Metrics

// Observer returns the processor.Observer that keeps these metrics: the Config.Observer of every processor
// of the program.
func (m *Metrics) Observer() processor.Observer { return (*observer)(m) }

// proc is Metrics.proc.
func (m *observer) proc(process string) *procMetrics { return (*Metrics)(m).proc(process) }

// Batch implements processor.Observer.
func (m *observer) Batch(process string, n int) {
	p := m.proc(process)
	p.batches.Inc()
	p.read.Add(float64(n))
}

// Handled implements processor.Observer.
func (m *observer) Handled(process string, took time.Duration, err error) {
	p := m.proc(process)
	p.duration.Observe(took.Seconds())
	if err != nil {
		p.failures.Inc()
	} else {
		p.handled.Inc()
	}
}

// Position implements processor.Observer.
func (m *observer) Position(process string, createdAt time.Time) {
	m.proc(process).position.Set(float64(createdAt.UnixNano()) / 1e9)
}

// Halted implements processor.Observer.
func (m *observer) Halted(process string, halted bool) { m.proc(process).halted.Set(b2f(halted)) }

// SinkUnavailable implements processor.Observer.
func (m *observer) SinkUnavailable(process string, unavailable bool) {
	m.proc(process).unavailable.Set(b2f(unavailable))
}

// SourceWaiting implements processor.Observer: the process's one inorder_source_waiting series
// names the column the stream waits for while it waits, and no column once it reads.
func (m *observer) SourceWaiting(process, column string, waiting bool) {
	p := m.proc(process)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !waiting {
		column = ""
	}
	m.sourceWaiting.DeleteLabelValues(process, p.sourceColumn)
	p.sourceColumn = column
	m.sourceWaiting.WithLabelValues(process, column).Set(b2f(waiting))
}

// Retrying implements processor.Observer.
func (m *observer) Retrying(process string, retrying bool) {
	m.proc(process).retrying.Set(b2f(retrying))
}

// Locked implements processor.Observer.
func (m *observer) Locked(process string, locked bool) { m.proc(process).locked.Set(b2f(locked)) }

// Hold implements processor.Observer.
func (m *observer) Hold(process string, held time.Duration) { m.proc(process).hold.Set(held.Seconds()) }

// Resent implements processor.Observer.
func (m *observer) Resent(process string, records int) { m.proc(process).resent.Add(float64(records)) }

// InFlight implements processor.Observer.
func (m *observer) InFlight(process string, records int, oldest time.Duration) {
	p := m.proc(process)
	p.inFlight.Set(float64(records))
	p.inFlightOldest.Set(oldest.Seconds())
}

// Connected implements processor.Observer.
func (m *observer) Connected(process string, ok bool) {
	p := m.proc(process)
	m.mu.Lock()
	if ok {
		p.state = stateConnected
	} else {
		p.state = stateReconnecting
	}
	// Set under the lock, so that the gauge and the state Health reads never disagree for long.
	p.connected.Set(b2f(ok))
	m.mu.Unlock()
}

// CredentialsRefused implements processor.Observer.
func (m *observer) CredentialsRefused(process string, refusal string) {
	p := m.proc(process)
	m.mu.Lock()
	p.refusal = refusal
	p.refused.Set(b2f(refusal != ""))
	m.mu.Unlock()
}

// notConnected describes the tracked processes that are not connected, sorted by name, for Health:
// "process booking_sms: reconnecting", with the refusal of the credentials when that is why.
func (m *Metrics) notConnected() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, p := range m.procs {
		switch {
		case p.refusal != "": // a partitioned process's coordination may meet it while connected otherwise
			out = append(out, fmt.Sprintf("process %s: reconnecting: %s", name, p.refusal))
		case p.state == stateStarting:
			out = append(out, fmt.Sprintf("process %s: starting (not connected yet)", name))
		case p.state == stateReconnecting:
			out = append(out, fmt.Sprintf("process %s: reconnecting", name))
		}
	}
	sort.Strings(out)
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WatchLag returns an actor (for lifecycle.Group.Add) that measures the lag of every tracked process every interval
// (zero means 15 s) until its context is done, and then returns nil. Each measurement reads
// the process's cursor row (cursor.Read) and counts the source rows after its durable position
// (cursor.Info.Measure, up to 1,000,000 rows) on one connection of pool. Rounds run one after the
// other, never piling up, and each is cut off after the interval (at least 5s, at most 30s). A failed
// measurement counts in inorder_lag_errors_total and leaves the lag gauges at their last value. A process
// without a cursor row yet, or whose processor has not yet recorded its source, is skipped and looked at
// again after a second rather than a whole interval. Give it the pool of the program's processor.Client
// (Client.Pool), which owns the program's connections: what it holds, the processors wait for.
func (m *Metrics) WatchLag(pool *pgxpool.Pool, interval time.Duration) func(ctx context.Context) error {
	if interval <= 0 {
		interval = defaultLagInterval
	}
	return func(ctx context.Context) error {
		timeout := min(max(interval, minLagTimeout), maxLagTimeout)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			stopping := func() bool { return ctx.Err() != nil }
			pending := m.measureLag(rctx, pool, stopping)
			due := m.lookXmin(rctx, pool, stopping)
			cancel()
			next := interval
			if pending {
				// A processor starting up records its source within a poll or two: look again soon
				// rather than show no lag for a whole interval.
				next = min(interval, lagPendingRetry)
			}
			if due > 0 {
				// A holder of the xmin horizon passes the threshold before the next round: name it then
				// (only with a threshold shorter than the interval), though not more than once a second.
				next = min(next, max(due, lagPendingRetry))
			}
			t.Reset(max(0, next-time.Since(start)))
		}
	}
}

// measureLag runs one round of lag measurements; a failure counts as an error unless the program is
// stopping. It reports whether a process had nothing to measure against yet.
func (m *Metrics) measureLag(ctx context.Context, pool *pgxpool.Pool, stopping func() bool) (pending bool) {
	names := m.processes()
	if len(names) == 0 {
		return false
	}
	fail := func(name string) {
		if !stopping() {
			m.lagErrors.WithLabelValues(name).Inc()
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		for _, n := range names {
			fail(n)
		}
		return false
	}
	defer conn.Release()
	// Every cursor row in one read: a partitioned process needs its partitions' rows too.
	all, err := cursor.Read(ctx, conn.Conn(), cursor.ReadOpts{})
	if err != nil {
		for _, n := range names {
			fail(n)
		}
		return false
	}
	// A tracked name is a process, or a partition an instance works, measured on its own.
	procs := map[string]cursor.Process{}
	for _, p := range all {
		procs[p.Name] = p
		if p.Partitioned() {
			for _, s := range p.Streams {
				procs[s.Process] = cursor.Process{Name: s.Process, Info: s, Streams: []cursor.Info{s}}
			}
		}
	}
	for i, name := range names {
		measured, err := m.measureOne(ctx, conn.Conn(), procs, name)
		if err != nil {
			fail(name)
			if ctx.Err() != nil { // out of time: the rest are cut off too
				for _, n := range names[i+1:] {
					fail(n)
				}
				return false
			}
		}
		pending = pending || (err == nil && !measured)
	}
	return pending
}

// measureOne measures the lag of one process from the cursor rows read for this round; it reports false
// when there is nothing to measure against yet. The lag of a partitioned process is that of its
// partitions together: the rows behind every partition's position and the oldest of them.
func (m *Metrics) measureOne(ctx context.Context, conn *pgx.Conn, procs map[string]cursor.Process, name string) (bool, error) {
	p, ok := procs[name]
	if !ok || len(p.Unregistered) > 0 {
		return false, nil // not registered yet
	}
	var rows int64
	var oldest, now time.Time
	for _, pi := range p.Streams {
		if pi.Source.Table == "" {
			return false, nil // never locked: nothing to measure against yet
		}
		if err := pi.Measure(ctx, conn); err != nil {
			return false, err
		}
		lag := *pi.Lag
		rows += lag.Rows
		now = lag.Now
		if !lag.Oldest.IsZero() && (oldest.IsZero() || lag.Oldest.Before(oldest)) {
			oldest = lag.Oldest
		}
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(0, now.Sub(oldest).Seconds())
	}
	m.lagRows.WithLabelValues(name).Set(float64(rows))
	m.lagSeconds.WithLabelValues(name).Set(age)
	m.noteParked(name, p.Streams)
	var late int64
	for _, pi := range p.Streams {
		late += pi.LateRows
	}
	m.late.WithLabelValues(name).Set(float64(late))
	if h := p.Streams[0].Source.Horizon; h != "" {
		for _, k := range []inordertype.Horizon{inordertype.HorizonClock, inordertype.HorizonWriters, inordertype.HorizonTransactions} {
			m.tracking.WithLabelValues(name, string(k)).Set(b2f(k == h))
		}
	}
	w := p.Streams[0].Source.Where
	m.filter.WithLabelValues(name, w).Set(b2f(w != ""))
	return true, nil
}

// PassedOver counts a move of process's position past rows its filter passes over (processor.Observer).
func (m *observer) PassedOver(process string) { m.proc(process).passOvers.Inc() }

// lookXmin looks at who holds the database's xmin horizon, on a connection of pool, and sets the xmin
// series: each holder past the threshold, and the longest hold. A failed look counts as an error unless the
// program is stopping, and leaves the series as they were. It returns how soon a holder seen under the
// threshold passes it (xmin.Hold.Next), zero when none.
func (m *Metrics) lookXmin(ctx context.Context, pool *pgxpool.Pool, stopping func() bool) time.Duration {
	m.mu.Lock()
	watch := m.xmin
	m.mu.Unlock()
	hold, err := watch.Look(ctx, pool)
	if err != nil {
		if !stopping() {
			m.xminErrors.Inc()
		}
		return 0
	}
	var longest time.Duration
	holders := map[[6]string]bool{}
	for _, x := range hold.Holders {
		name := x.GID
		if x.Kind == xmin.Slot {
			name = x.Slot
		}
		labels := [6]string{string(x.Kind), strconv.Itoa(x.PID), x.Database, x.User, x.Application, name}
		m.xminHolder.WithLabelValues(labels[:]...).Set(x.Held.Seconds())
		holders[labels] = true
		longest = max(longest, x.Held)
	}
	m.xminHeld.Set(longest.Seconds())
	// The holders gone since the last look go, the others stay throughout: no scrape sees them missing.
	m.mu.Lock()
	defer m.mu.Unlock()
	for labels := range m.xminSeries {
		if !holders[labels] {
			m.xminHolder.DeleteLabelValues(labels[:]...)
		}
	}
	m.xminSeries = holders
	return hold.Next
}

// noteParked sets the parked series of process name from its streams' rows, as read for this round.
func (m *Metrics) noteParked(name string, streams []cursor.Info) {
	keys, records := 0, 0
	var since time.Time
	for _, s := range streams {
		keys, records = keys+s.ParkedKeys, records+s.ParkedRecords
		if s.ParkedKeys > 0 && (since.IsZero() || s.ParkedSince.Before(since)) {
			since = s.ParkedSince
		}
	}
	age := 0.0
	if !since.IsZero() {
		age = max(0, time.Since(since).Seconds())
	}
	m.parkedKeys.WithLabelValues(name).Set(float64(keys))
	m.parkedRecords.WithLabelValues(name).Set(float64(records))
	m.parkedOldest.WithLabelValues(name).Set(age)
}

// perProcessCounter is a counter with one series per process.
func perProcessCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"process"})
}

// perProcessGauge is a gauge with one series per process.
func perProcessGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"process"})
}
