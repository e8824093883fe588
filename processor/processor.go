package processor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
	"github.com/inorder-dev/inorder/internal/store"
)

// role is what this instance is to the process, as the last batch found.
type role int

const (
	roleNone    role = iota // starting, reconnecting, or the row was found free of any owner
	roleOwner               // it owns the process and delivers its records
	roleStandby             // another instance owns the process; this one waits to take over
)

// Processor moves the records of one source table to a handler, strictly in (created_at, id) order. It runs
// the loop (Run: lock, horizon, read, deliver, commit, wait) and wires the parts that do each, every part
// owning its own state: the reader, the horizon's watch, the executor, the waiter and the others below.
type Processor[T any] struct {
	cfg Config[T]
	// cursors owns the processor's cursor repository and idle probe: its Client's store (the Client it was
	// given, or, while it runs, its own: see Run).
	cursors *store.Store
	// cur is the process's cursor repository, open while Run runs; the parts that use it are given it as it
	// opens (see openCursor).
	cur       *store.Repository
	dbTimeout time.Duration // the Client's DatabaseTimeout
	log       zerolog.Logger
	obs       Observer
	// async and txBatch are the handler when it is an AsyncHandler, or a TxHandler that takes batches, and
	// windowed says that records go through the keyed window: how a batch is delivered (deliverBatch).
	async    handlers.AsyncHandler[T]
	txBatch  handlers.TxBatchHandler[T]
	windowed bool

	// The parts.
	rd      reader[T]    // reads the batches (reader.go)
	hz      horizonWatch // watches the transactions in flight and says the horizon (horizon.go)
	exec    executor[T]  // runs the handler and decides what becomes of a record (executor.go)
	wt      waiter       // waits between batches, on a notification or the probe (listen.go, probe.go)
	pool    poolerWatch  // tells of a pooler (pooler.go)
	fleet   *sharer      // shares the fleet's work (fleet.go); nil for a partition
	parked  parkedKeys   // the keys parked in the stream (park.go)
	failing failing      // what this instance knows of the failing record (failing.go)
	creds   credentials  // a refusal of the credentials waited out
	tracing tracing      // the tracer and the batch's span (trace.go)

	// State across batches, used by the one goroutine running Run.
	role    role
	tenure  tenure    // the tenure in which this instance last owned the process (see tenure.go)
	last    lastBatch // what the last batch found that the next wait depends on
	paused  bool      // the cursor row said paused at the last batch
	started func()    // gives back the processor's start-up turn on its Client (see Client.startTurn)
	hooks   runHooks  // set by a Partitioned runner for the processor of one partition
	// connectedBefore says that the process had connected before this processor opened its cursor (set
	// by a Partitioned runner): credentials refused at the open are then an outage, not a start-up's
	// mistake.
	connectedBefore bool
}

// New checks cfg and returns a processor. It does not touch the database; Run does.
func New[T any](cfg Config[T]) (*Processor[T], error) {
	if _, ok := store.PartitionOf(cfg.Process); ok {
		return nil, fmt.Errorf("processor %q: the name has the form of a partition's (<process>#<index>/<count>), "+
			"which inorder gives the partitions of a partitioned process; name the process otherwise", cfg.Process)
	}
	return newStream(cfg)
}

// newStream is New without the name check, for the partitions of a Partitioned runner.
func newStream[T any](cfg Config[T]) (*Processor[T], error) {
	if cfg.Process == "" {
		return nil, errors.New("processor: Config.Process is required")
	}
	var cursors *store.Store // a processor without a Client makes one of its own when it runs
	if cfg.Client != nil {
		if err := cfg.Client.fit(&cfg.ClientConfig); err != nil {
			return nil, fmt.Errorf("processor %q: %w", cfg.Process, err)
		}
		cursors = cfg.Client.cursors
	} else if cfg.ClientConfig.ConnConfig == nil {
		return nil, fmt.Errorf("processor %q: Config.ClientConfig.ConnConfig is required without a Config.Client", cfg.Process)
	}
	if (cfg.Handler == nil) == (cfg.TxHandler == nil) {
		return nil, fmt.Errorf("processor %q: set exactly one of Config.Handler and Config.TxHandler", cfg.Process)
	}
	if cfg.MaxInFlight > 1 && cfg.TxHandler != nil {
		return nil, fmt.Errorf("processor %q: a TxHandler writes in the cursor transaction, one record at a time; "+
			"MaxInFlight must be at most 1", cfg.Process)
	}
	if err := cfg.checkSigns(); err != nil {
		return nil, fmt.Errorf("processor %q: %w", cfg.Process, err)
	}
	if cfg.OnHalt != "" && cfg.OnHalt != OnHaltHalt && cfg.OnHalt != OnHaltPark {
		return nil, fmt.Errorf("processor %q: on-halt %q is neither %q nor %q", cfg.Process, cfg.OnHalt, OnHaltHalt, OnHaltPark)
	}
	if cfg.Checkpoint != "" && cfg.Checkpoint != CheckpointRecord && cfg.Checkpoint != CheckpointBatch {
		return nil, fmt.Errorf("processor %q: checkpoint %q is neither %q nor %q", cfg.Process, cfg.Checkpoint,
			CheckpointRecord, CheckpointBatch)
	}
	clockMargin := cfg.InsertLatency
	if clockMargin <= 0 {
		clockMargin = clockInsertLatency
	}
	cfg.withDefaults()
	if cfg.HandlerTimeout >= cfg.IdleInTransactionTimeout {
		return nil, fmt.Errorf("processor %q: handler timeout %s must be shorter than the idle-in-transaction "+
			"timeout %s, or a slow handler loses the cursor lock mid-record", cfg.Process, cfg.HandlerTimeout,
			cfg.IdleInTransactionTimeout)
	}
	if cfg.HandlerTimeout+leaseMargin(cfg.Lease) >= cfg.Lease {
		return nil, fmt.Errorf("processor %q: handler timeout %s must be well shorter than the lease %s: an owner "+
			"starts a record only while its lease covers the call", cfg.Process, cfg.HandlerTimeout, cfg.Lease)
	}
	p := &Processor[T]{cursors: cursors,
		cfg:       cfg,
		dbTimeout: cfg.databaseTimeout(),
		log:       defaultLogger(cfg.Logger).With().Str("process", cfg.Process).Logger(),
		obs:       cfg.Observer,
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	p.hz = newHorizonWatch(&p.cfg, clockMargin, p.log, p.obs)
	p.failing = failing{process: cfg.Process, obs: p.obs, log: p.log}
	p.parked = parkedKeys{on: cfg.OnHalt == OnHaltPark, log: p.log}
	p.creds = credentials{process: cfg.Process, log: p.log, obs: p.obs}
	p.wt = newWaiter(&p.cfg, p.log)
	p.pool = newPoolerWatch(&p.cfg, p.log)
	p.exec = newExecutor(&p.cfg, p.log, p.obs, &p.tracing)
	var err error
	if p.rd, err = newReader(&p.cfg, p.log, p.obs); err != nil {
		return nil, err
	}
	if cfg.Handler != nil {
		p.async, _ = cfg.Handler.(handlers.AsyncHandler[T])
	} else {
		p.txBatch, _ = cfg.TxHandler.(handlers.TxBatchHandler[T])
	}
	p.windowed = cfg.MaxInFlight > 1 && cfg.Handler != nil && p.async == nil
	return p, nil
}

// Name returns the process name.
func (p *Processor[T]) Name() string { return p.cfg.Process }

// defaultLogger is l, or for the zero Logger one that writes JSON lines to standard error at info level:
// a library user sees what the processor does without configuring anything.
func defaultLogger(l zerolog.Logger) zerolog.Logger {
	if reflect.ValueOf(l).IsZero() {
		return zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	}
	return l
}

// fatalError marks an error that retrying cannot fix.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

func isFatal(err error) bool {
	var f fatalError
	if errors.As(err, &f) || errors.Is(err, ErrInvalidSource) || errors.Is(err, store.ErrInUse) ||
		errors.Is(err, store.ErrForgotten) || pooler.Fatal(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "42", "28", "3D", "3F": // undefined object or no privilege, auth, no database, no schema
			return true
		}
	}
	return false
}

// runHooks let a runner above the loop (Partitioned) follow one stream: owned is told when the processor
// takes the process's cursor, and afterBatch after each batch whether it owns it and whether the stream
// is idle, and stops the processor (Run returns nil) by answering true.
type runHooks struct {
	owned      func()
	afterBatch func(owned, idle bool) (stop bool)
}

// Run works the stream until ctx is done, then lets the record in flight finish (bounded by
// ShutdownTimeout), makes the position durable, unlocks the cursor and closes its connection. It returns
// nil after such a clean stop, and an error naming the process when something retrying cannot fix
// happened (a missing table or column, a missing index, no privilege). A lost database connection is not
// such an error: Run reconnects with backoff and goes on.
func (p *Processor[T]) Run(ctx context.Context) error {
	if p.cfg.Client == nil {
		// A lone processor runs on a Client of its own, which owns every connection it makes, as a
		// shared one does: a session and one connection to work on (and the listener's, when it listens).
		c, err := ownClient(&p.cfg, 2)
		if err != nil {
			return fmt.Errorf("process %q: %w", p.cfg.Process, err)
		}
		p.cfg.Client, p.cursors = c, c.cursors
		defer func() { p.cfg.Client, p.cursors = nil, nil; c.Close() }()
	}
	// work outlives ctx by at most ShutdownTimeout: the record in flight and the final commit use it.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	defer cutOffAfter(ctx, p.cfg.ShutdownTimeout, p.log, cancelWork)()

	p.started = p.cfg.Client.startTurn(ctx)
	p.hz.shares = &p.cfg.Client.polls
	defer p.started()
	if err := p.startUp(ctx, work); err != nil {
		if ctx.Err() != nil && !isFatal(err) {
			return nil
		}
		return fmt.Errorf("process %q: %w", p.cfg.Process, pooler.Explain(err))
	}
	defer p.release(ctx)

	// The database's prober also takes the steps of the checkpoint tables' rotation (see store.Prober), so
	// every processor holds it, whether it probes or not.
	prober := p.cursors.Prober()
	defer prober.Close()
	if p.cfg.ProbeInterval > 0 {
		p.wt.prober = prober
		defer func() { p.wt.prober = nil }()
	}

	p.cur.Session.Detach() // the pooler's check takes connections of the pool
	if err := p.pool.detect(work, p.cfg.Client.shared); err != nil {
		return fmt.Errorf("process %q: %w", p.cfg.Process, err)
	}
	if p.pool.listens() {
		listenCtx, stopListening := context.WithCancel(ctx)
		listening := make(chan struct{})
		p.wt.listened = p.rd.table
		client := p.cfg.Client
		go func() { defer close(listening); p.wt.listen(listenCtx, client) }()
		p.pool.stopListening = stopListening
		defer func() { stopListening(); <-listening }()
	}

	if p.hooks.afterBatch == nil {
		// One stream shares the fleet's work; a partition's runner balances its partitions itself.
		p.fleet = newSharer(&p.cfg, p.cur.FleetWatch(), p.cur, p.log)
		p.wt.fleet = p.fleet
		p.cur.Lease.DeferTake(p.fleet.takeDelay)
	}
	p.cur.Session.Detach()
	woken := false
	for ctx.Err() == nil {
		p.last.rowBusy = false
		n, wait, err := p.tick(ctx, work)
		p.cur.Session.Detach() // on a Client's connections: hold none while not locked
		if !p.cur.Lock.Locked() && p.role == roleOwner {
			p.exec.redriveAfterOutage(work)
		}
		if n > 0 {
			p.wt.probeGap, p.wt.lastRecords = 0, time.Now()
		}
		if p.hooks.afterBatch != nil && err == nil && p.hooks.afterBatch(p.role == roleOwner, n == 0 && wait == 0) {
			return nil // the runner above moves on
		}
		if err == nil && wait == 0 && ctx.Err() == nil && p.fleet != nil && p.role == roleOwner &&
			p.fleet.shareWork(work) {
			p.role = roleStandby
			p.obs.Locked(p.cfg.Process, false)
			continue // standing by now; another instance takes the process
		}
		if err != nil {
			p.abort(work)
			_, refused := dial.CredentialsRefused(err)
			if isFatal(err) && !refused { // reported once, by whoever called Run
				return fmt.Errorf("process %q: %w", p.cfg.Process, pooler.Explain(err))
			}
			if ctx.Err() != nil {
				break
			}
			// Credentials refused once connected were rotated under the process: an outage, waited out.
			if refused || p.cur.Session.Broken(err) {
				p.reconnect(ctx, work, err)
				continue
			}
			p.log.Error().Err(store.NameSetting(err)).Msg("batch failed; retrying")
			wait = p.cfg.RetryMin
		}
		wait, wakeable := p.nextWait(n, wait, woken)
		woken = false
		if wait > 0 {
			if wakeable {
				p.endKeptLock(work) // a wait for rows, on the probe; a retry's backoff keeps its transaction
			}
			woken = p.wt.idle(ctx, wait, wakeable, idleWatch{owner: p.role == roleOwner, heldLong: p.last.heldLong,
				table: p.rd.table, margin: p.hz.margin(), known: p.rd.shape.known})
			p.hz.woke, p.wt.woke = p.wt.woke, time.Time{}
		}
	}
	return nil
}

// endKeptLock ends, before a wait on the probe, the transaction in which the last batch locked the row again
// for the next one: the probe borrows a connection of the Client's pool, which a lone processor's Client
// has one of, and renews only a lease whose row no transaction holds, so a wait on it must hold neither.
// Without the probe the wait keeps the transaction, as the next batch goes on in it.
func (p *Processor[T]) endKeptLock(work context.Context) {
	if p.wt.prober == nil || !p.cur.Lock.Locked() {
		return
	}
	if err := p.cur.Lock.Unlock(work); err != nil {
		p.log.Debug().Err(err).Msg("could not end the transaction kept for the next batch; the next batch connects again")
	}
	p.cur.Session.Detach()
}

// release gives the cursor up when Run ends: the position stays as committed, the lease is given up so that
// a standby takes over at once.
func (p *Processor[T]) release(ctx context.Context) {
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.cur.Release(relCtx); err != nil {
		p.log.Warn().Err(err).Msg("release cursor")
	}
	p.cur.Unclaim()
	p.obs.Locked(p.cfg.Process, false)
	if p.role == roleOwner {
		p.log.Info().Msg("cursor released")
	}
}

// cutOffAfter cancels work (cancelWork) once timeout, the ShutdownTimeout, has passed since ctx was done:
// the record in flight is abandoned then, as log says. The returned function ends the watch.
func cutOffAfter(ctx context.Context, timeout time.Duration, log zerolog.Logger, cancelWork context.CancelFunc) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn().Str("shutdown_timeout", timeout.String()).Msg("record in flight did not finish in time; abandoning it")
			cancelWork()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// nextWait is how long to wait before the next batch, after one that delivered n records and asked to wait
// wait (a retry's backoff), and whether a notification may cut the wait short. woken says a notification
// came during the last wait.
func (p *Processor[T]) nextWait(n int, wait time.Duration, woken bool) (time.Duration, bool) {
	wakeable := false
	if n == 0 && wait == 0 {
		wait, wakeable = p.cfg.PollInterval, true
		switch {
		case woken || p.last.lookSoon || p.last.rowBusy:
			// A notification came, or a writer had just begun, yet nothing was readable: the new rows
			// may still lie within the insert-latency margin below now, or commit in a moment. (Or an
			// operator action held the row for a moment.) Look again just after the margin.
			wait = 2*p.hz.margin() + time.Millisecond
		case p.rd.shape.wait != nil:
			// Waiting for the source to fit again: look each poll interval, the probe's rows or not.
		case p.last.heldLong && p.last.heldFor < p.cfg.PollInterval:
			// A transaction has held the horizon for a moment: most often a writer whose commit waits for
			// its flush to disk, which a busy disk makes take tens of milliseconds. The probe cannot tell
			// when it ends (it would see rows the horizon holds), so look again after as long as it has
			// held so far: a short hold costs the rows behind it about as long again, not a whole poll
			// interval, and a long one (a report, a dump) is looked at every poll interval as before.
			wait = max(p.last.heldFor, 2*p.hz.margin()+time.Millisecond)
		case p.wt.probesRows(p.role == roleOwner, p.last.heldLong):
			// The probe watches for what a batch would look for, and renews the lease; a batch still
			// comes now and then (see idleBatch).
			wait = p.hz.late.idleBatch(p.cfg.PollInterval, p.cfg.Lease)
			if p.cur.Lease.ProbeRenewal() != nil {
				return wait, wakeable // the wait itself sees that the lease is renewed (see idle)
			}
		}
	}
	// Look at the row often enough to renew the lease (the owner) or to say the instance is there (a
	// standby), both due at a third of it.
	return min(wait, p.cfg.Lease/3), wakeable
}

// startUp opens the process (see open), again with backoff while the database cannot be reached or the
// connection is lost in the middle of it (a session ended by the server while the process registers, say);
// any other refusal (a schema older than this binary, a role without the grants it needs, a source that
// does not fit) ends the start-up at once.
func (p *Processor[T]) startUp(ctx, work context.Context) error {
	for attempt := 1; ; attempt++ {
		err := p.open(ctx, work)
		if err == nil {
			return nil
		}
		if _, refused := dial.CredentialsRefused(err); refused && p.connectedBefore {
			// A partition taken up while the credentials are refused: its process had connected, so this
			// is the outage the process waits out, not a mistake of its start-up.
			p.creds.refused(err)
		} else if isFatal(err) || !store.IsConnectionError(err) {
			return err
		} else {
			p.log.Warn().Err(err).Int("attempt", attempt).Msg("database unreachable; retrying")
		}
		if !sleep(ctx, backoff(attempt, 100*time.Millisecond, p.creds.retryMax(p.cfg.ReconnectMax))) {
			return ctx.Err()
		}
	}
}

func (p *Processor[T]) open(ctx, work context.Context) error {
	if err := p.openCursor(work); err != nil {
		return err
	}
	if err := p.cur.Claim(); err != nil {
		return err
	}
	// The checks below take a few statements each; together they must not wait on a dead path forever.
	checks, cancelChecks := context.WithTimeoutCause(work, 3*p.dbTimeout,
		&store.UnansweredError{Timeout: 3 * p.dbTimeout})
	defer cancelChecks()
	t, err := p.rd.inspect(checks)
	if err != nil {
		p.abandon(work)
		return err
	}
	p.rd.table, p.hz.kind = t, t.Horizon
	p.rd.knowShape(t)
	p.hz.rideLocks(t)
	p.tracing = newTracing(p.cfg.TracerProvider, p.cfg.Process, p.cfg.SynchronousCommit || p.cfg.TxHandler != nil, t)
	p.rd.prepareScan(t)
	if err := p.rd.checkColumns(t); err != nil {
		p.abandon(work)
		return err
	}
	reg := registration{cur: p.cur, table: t, process: p.cfg.Process, start: p.cfg.StartFrom, log: p.log}
	if err := reg.register(checks); err != nil {
		p.abandon(work)
		return err
	}
	p.obs.Connected(p.cfg.Process, true)
	for _, w := range t.Warnings {
		p.log.Warn().Str("table", t.Qualified).Msg(w)
	}
	ev := p.log.Info().Str("table", t.Qualified).Str("horizon", string(t.Horizon))
	if t.Filtered() {
		ev = ev.Str("where", t.Spec.Where)
	}
	ev.Msg("source checked")
	return nil
}

// openCursor opens the process's cursor repository in the Client's store and gives it to the parts.
func (p *Processor[T]) openCursor(work context.Context) error {
	ccfg := store.Config{
		Timeout:                  p.dbTimeout,
		IdleInTransactionTimeout: p.cfg.IdleInTransactionTimeout,
		Lease:                    p.cfg.Lease,
		// No Start: the process is registered (see register) only once the source and the handler's
		// columns have been checked, so that a configuration error leaves no cursor row behind.
		Shared:            p.cfg.Client.shared,
		Transactional:     p.cfg.TxHandler != nil,
		SynchronousCommit: p.cfg.SynchronousCommit,
	}
	cur, err := p.cursors.Open(work, p.cfg.Process, ccfg)
	if err != nil {
		return err
	}
	p.cur, p.exec.cur, p.rd.cur, p.hz.cur, p.parked.cur, p.wt.cur, p.pool.cur = cur, cur, cur, cur, cur, cur, cur
	p.creds.accepted()
	return nil
}

// abandon gives up a start-up whose checks failed: the cursor row it registered goes again (a process that
// never ran is not left for status to show), and the connection is closed.
func (p *Processor[T]) abandon(work context.Context) {
	if err := p.cur.Registration.Unregister(work); err != nil {
		p.log.Warn().Err(err).Msg("could not remove the cursor row of a process that never ran")
	}
	p.cur.Unclaim()
	_ = p.cur.Release(work)
}

func (p *Processor[T]) reconnect(ctx, work context.Context, cause error) {
	if _, refused := dial.CredentialsRefused(cause); refused {
		p.creds.refused(cause)
	} else if store.Unanswered(work, cause) {
		p.log.Warn().Err(cause).Str("database_timeout", p.dbTimeout.String()).
			Msg("the database did not answer in time: the connection counts as dead; reconnecting")
	} else {
		p.log.Warn().Err(store.NameSetting(cause)).Msg("database connection lost; reconnecting")
	}
	p.obs.Connected(p.cfg.Process, false)
	p.obs.Locked(p.cfg.Process, false)
	p.role = roleNone
	p.rd.takeAhead(inordertype.Position{})
	// The adaptive bound starts over too: a read the loss cut short says nothing of the backlog.
	p.rd.limit = 0
	// What the tracker knew may not hold for the server it comes back to (a restarted server numbers
	// transactions anew and brings prepared ones back under new ids): start over, holding on every
	// transaction present at the first poll.
	p.hz.tracker = newTracker(p.cfg.InsertLatency)
	p.tenure.sourceSaved = false
	for attempt := 1; ctx.Err() == nil; attempt++ {
		if !sleep(ctx, backoff(attempt, 100*time.Millisecond, p.creds.retryMax(p.cfg.ReconnectMax))) {
			return
		}
		err := p.cur.Reconnect(work)
		if err == nil {
			p.log.Info().Int("attempts", attempt).Msg("reconnected")
			p.creds.accepted()
			p.obs.Connected(p.cfg.Process, true)
			p.recheck(work)
			return
		}
		if _, refused := dial.CredentialsRefused(err); refused {
			p.creds.refused(err)
			continue
		}
		p.log.Warn().Err(err).Int("attempt", attempt).Msg("reconnect failed")
	}
}

// credentials is what a processor knows of the database's refusal of its credentials: the refusal it waits
// out, "" when none.
type credentials struct {
	refusal string
	process string
	log     zerolog.Logger
	obs     Observer
}

// refusedRetryMax caps the backoff between reconnections while the database refuses the credentials: a
// rotation's new password works as soon as the rotation is done, and the process should resume within
// seconds of it, not at its next attempt half a minute later. A refused attempt costs the server little.
const refusedRetryMax = 3 * time.Second

// refused says, once per refusal, that the database refused the credentials (or they could not be had),
// naming the user and the server, and tells the observer: the processor waits it out, reconnecting with
// backoff, as for a lost connection, since a rotation changes a password under a running process and the
// new one works once the rotation is done (see ClientConfig.BeforeConnectFunc).
func (c *credentials) refused(err error) {
	line, _ := dial.CredentialsRefused(err)
	if line == c.refusal {
		return
	}
	c.refusal = line
	c.log.Error().Msg(line + "; reconnecting until they are accepted")
	c.obs.CredentialsRefused(c.process, line)
}

// accepted ends a refusal of the credentials: the processor connected again.
func (c *credentials) accepted() {
	if c.refusal == "" {
		return
	}
	c.refusal = ""
	c.log.Info().Msg("the database accepts the credentials again")
	c.obs.CredentialsRefused(c.process, "")
}

// retryMax is the longest backoff between reconnections, most as configured: shorter while the
// credentials are refused (see refusedRetryMax).
func (c *credentials) retryMax(most time.Duration) time.Duration {
	if c.refusal != "" {
		return min(most, refusedRetryMax)
	}
	return most
}

// sleep waits d or until ctx is done, and reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// tick runs one batch: lock, read below the horizon, deliver in order, advance, unlock. It returns how
// many records were delivered and how long to wait before the next tick (zero: go on at once if n > 0,
// else wait the poll interval).
func (p *Processor[T]) tick(ctx, work context.Context) (n int, wait time.Duration, err error) {
	began := time.Now()
	if !p.cur.Lock.Locked() {
		p.rd.takeAhead(inordertype.Position{}) // a batch read ahead goes on in the transaction it was read in, or not at all
	}
	ok, err := p.lock(work)
	if p.started != nil {
		p.started() // the first look at the row is made: another processor of the client starts
	}
	if err != nil || !ok {
		return 0, 0, err
	}
	// keep says that the batch ended with its position committed and the row locked again for the next
	// one, in one round trip: the next batch goes on in that transaction.
	keep := false
	defer func() {
		if err == nil && p.cur.Lock.Locked() && !keep {
			end := p.tracing.startCommit(work, n)
			err = p.cur.Lock.Unlock(work)
			end(err)
		}
		p.tenure.lastPos, p.tenure.knownPos = p.cur.Position.State().Position, err == nil
		p.tracing.endBatch(n, err)
	}()
	if err := p.saveSource(work); err != nil {
		return 0, 0, err
	}
	if p.rd.shape.stale {
		// A read was refused for its columns: inspect them before anything reads the source again.
		if wait, err := p.followShape(work, p.rd.shape.known); err != nil || wait {
			return 0, 0, err
		}
	}
	if goOn, err := p.followRedrive(ctx, work); err != nil || !goOn {
		return 0, 0, err
	}
	if wait := p.followOperator(); wait > 0 {
		return 0, wait, nil
	}
	horizonAt := time.Now()
	h, err := p.horizon(work)
	if err != nil || !p.cur.Lock.Locked() {
		return 0, 0, err
	}
	if err := p.hz.noteHold(work, h, p.rd.table); err != nil {
		return 0, 0, err
	}
	if err := p.hz.countLate(work, p.rd.table); err != nil {
		return 0, 0, err
	}
	// A writer first seen at this poll is most likely a short transaction about to commit: rather than a
	// whole poll interval, look again just after the guard. (Other transactions rarely write here.)
	p.last.lookSoon = h.hold != nil && h.hold.Writer && !h.hold.Since.Before(h.now)
	p.last.heldLong = h.hold != nil && h.now.Sub(h.hold.Since) > 2*p.cfg.InsertLatency
	p.last.heldFor = 0
	if h.hold != nil {
		p.last.heldFor = h.now.Sub(h.hold.Since)
	}
	st := p.cur.Position.State() // a changed default may have moved the position back
	if h.at.IsZero() || !h.at.After(st.Position.CreatedAt) {
		return 0, 0, nil
	}
	readAt := time.Now()
	items, ok := p.rd.takeAhead(st.Position)
	if !ok {
		if items, err = p.rd.read(work, st.Position, h.at); err != nil {
			if p.rd.readRefused(err) {
				p.abort(work)
				return 0, 0, nil
			}
			return 0, 0, err
		}
	}
	p.obs.Batch(p.cfg.Process, len(items))
	// whole says that the read found every row the process keeps below the horizon (see passOver).
	whole := !ok && !p.rd.lastFull && p.rd.table.Filtered()
	if len(items) == 0 {
		if whole {
			keep, err = p.passOver(work, st.Position, h.at)
		}
		return 0, 0, err
	}
	p.tracing.startBatch(began, horizonAt, readAt, len(items))
	defer closeSpans(items)
	o := p.deliverBatch(ctx, work, st, items, h.at)
	n, wait, err = o.n, 0, o.err
	if o.failed != nil {
		o.fate = o.fate.atBatchEnd(ctx, work)
	}
	switch {
	case o.err != nil || o.lost:
	case o.failed != nil && o.fate.kind != fateCutOff:
		wait, err = p.fail(work, st, o.last, o.failed, o.fate)
	default: // nothing failed, or the shutdown cut the failing record off: nothing to record
		if whole && o.n == len(items) {
			o.last = passedTo(o.last, h.at, p.cfg.Checkpoint == CheckpointRecord)
		}
		keep, err = p.finish(work, st.Position, o)
		// On a Client's connections a process that others wait for ends its transaction with its batch:
		// the next batch waits its turn.
		keep = keep && !p.cur.Session.Contended()
	}
	now := time.Now()
	for _, it := range items[:n] {
		p.tenure.delivered.add(it.pos, now)
	}
	if n > 0 {
		p.hz.late.add(st.Position, items[n-1].pos, n, now)
	}
	return n, wait, err
}

// deliverBatch delivers a batch's items the way the process is configured to: in one transaction with a
// batch handler, through an asynchronous handler's window, a keyed window, or one at a time (reading the
// next batch ahead, below horizon, meanwhile).
func (p *Processor[T]) deliverBatch(ctx, work context.Context, st inordertype.State, items []item[T], horizon time.Time) outcome[T] {
	switch {
	case p.txBatch != nil:
		return p.deliverTxBatch(ctx, work, st, items)
	case p.async != nil:
		return p.deliverAsync(ctx, work, st, items)
	case p.windowed:
		return p.deliverWindow(ctx, work, st, items)
	}
	p.rd.readAhead(work, items, horizon)
	defer p.rd.joinAhead()
	return p.deliverSync(ctx, work, st, items)
}

// lock takes the cursor row for one batch, reporting false when another instance owns the process.
func (p *Processor[T]) lock(work context.Context) (bool, error) {
	ok, err := p.cur.Lock.TryLock(work)
	var busy *store.BusyError
	if errors.As(err, &busy) {
		// The lease decides: an owner that waits this long for a connection may lose the process to an
		// instance that has one, which is how work spreads over the fleet when one instance is short.
		p.log.Warn().Err(err).Msg("waiting for a connection: raise the instance's max-conns if this recurs")
		return false, nil
	}
	var stale *store.StaleOwnerError
	if errors.As(err, &stale) {
		p.log.Warn().Err(err).Str("owner", stale.Instance).Msg("cannot take over yet: the owner's lease ran out but " +
			"its session still holds the cursor row; grant this role pg_signal_backend to take over within the lease")
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e := p.cur.Lease.EndedSessions(); e.Own {
		p.log.Warn().Ints32("pids", e.PIDs).Msg("this instance's session from before the reconnect still held the " +
			"cursor row (cut off inside its batch); ended it")
	} else if len(e.PIDs) > 0 {
		p.log.Warn().Ints32("pids", e.PIDs).Str("owner", e.Instance).Msg("the owner's lease ran out while its " +
			"session still held the cursor row (cut off inside its batch); ended that session to take over")
	}
	p.pool.note()
	if !ok {
		if p.role == roleOwner && p.cur.Lease.Owner() {
			// Still the owner: an operator action holds the row for the moment it takes. Look again
			// shortly rather than stand by for a poll interval.
			p.last.rowBusy = true
			return false, nil
		}
		holder := p.cur.Lease.Holder()
		switch {
		case p.role == roleOwner:
			p.log.Info().Str("owner", holder).Msg("cursor taken by another instance; standing by")
			p.obs.Locked(p.cfg.Process, false)
		case p.role != roleStandby && holder != "":
			p.log.Info().Str("owner", holder).Msg("another instance works the process; standing by")
		}
		p.role = roleNone
		if holder != "" {
			p.role = roleStandby
		}
		return false, nil
	}
	if token := p.cur.Lease.Tenure(); p.role != roleOwner || token != p.tenure.token {
		// A new tenure: whatever happened to the row in between was done by other instances (or nobody),
		// not by an operator, and the records this instance delivered before are not its to recheck.
		p.log.Info().Str("position", p.cur.Position.State().Position.String()).Int64("epoch", p.cur.Lease.Epoch()).Msg("cursor locked")
		// A batch read ahead in the last tenure is dropped with it, once its statement is done.
		p.rd.takeAhead(inordertype.Position{})
		p.role, p.tenure = roleOwner, tenure{token: token, gen: p.tenure.gen + 1}
		p.parked.keys = nil // read again in the new tenure
		p.obs.Locked(p.cfg.Process, true)
		if p.hooks.owned != nil {
			p.hooks.owned()
		}
	}
	return true, nil
}
