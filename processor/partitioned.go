package processor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/rs/zerolog"
)

// PartitionOpts configures NewPartitioned.
type PartitionOpts struct {
	// Partitions is how many ordered streams the process is split into, by a stable hash of the key
	// column (see inordertype.Partition); records of one key stay in one stream, in order. Required, at least 1.
	// Changing it is an explicit operation: drain, then `inorder repartition`.
	Partitions int
	// Slots bounds how many partitions this instance works at once, and with it the cursor connections it
	// holds (one each, plus one to coordinate). Zero means every partition.
	Slots int
}

// left says why the processor of one partition stopped.
type left int

const (
	stopped    left = iota // its context is done, or it failed
	notOwner               // another instance works the partition: try another
	handedOver             // this instance handed the partition over, to balance or to take turns
)

// Partitioned runs one logical process as Partitions ordered streams, each with its own cursor row.
// Any number of instances run it; they share the partitions through the same ownership as a single
// stream, each working at most Slots of them at once. An instance that owns more than its share
// (partitions divided by the instances running) hands one over now and then, so the work spreads out as
// instances join; when one stops, the others take its partitions.
type Partitioned[T any] struct {
	cfg  Config[T]
	opts PartitionOpts
	log  zerolog.Logger
	// cursors owns the partitions' cursor repositories and their one idle probe: the Client's store, or a
	// private one for a process without a Client.
	cursors *store.Store

	mu       sync.Mutex
	working  map[int]bool // partitions a slot of this instance works or is trying
	owned    int          // partitions this instance owns now
	alive    int          // instances of the process seen at the last count
	free     int          // partitions nobody owned at the last look
	lastGive time.Time
	// refusal is the refusal of the credentials the coordination waits out, "" when none; refused counts
	// the looks it failed, for the backoff.
	refusal string
	refused int
}

// NewPartitioned checks cfg and opts and returns the runner. cfg.Process names the logical process;
// cfg.Source must have a key column (the default aggregate_id, or Source.KeyColumn).
func NewPartitioned[T any](cfg Config[T], opts PartitionOpts) (*Partitioned[T], error) {
	if opts.Partitions < 1 {
		return nil, fmt.Errorf("processor %q: at least 1 partition, got %d", cfg.Process, opts.Partitions)
	}
	if opts.Slots <= 0 || opts.Slots > opts.Partitions {
		opts.Slots = opts.Partitions
	}
	if cfg.Source.Partition != nil {
		return nil, fmt.Errorf("processor %q: Source.Partition is set by NewPartitioned", cfg.Process)
	}
	if strings.Contains(cfg.Process, "#") {
		return nil, fmt.Errorf("processor %q: a partitioned process's name may not hold '#', which names its partitions",
			cfg.Process)
	}
	probe := cfg
	probe.Process = store.PartitionName(cfg.Process, 0, opts.Partitions)
	if _, err := newStream(probe); err != nil { // the same checks as for one stream
		return nil, err
	}
	cfg.withDefaults()
	var cursors *store.Store // without a Client, its own Client's, made when it runs
	if cfg.Client != nil {
		cursors = cfg.Client.cursors
	}
	return &Partitioned[T]{cfg: cfg, opts: opts, cursors: cursors, working: map[int]bool{}, alive: 1,
		log: defaultLogger(cfg.Logger).With().Str("process", cfg.Process).Logger()}, nil
}

// Name returns the logical process name.
func (p *Partitioned[T]) Name() string { return p.cfg.Process }

// Run works partitions until ctx is done, then stops every partition cleanly (see Processor.Run). It
// returns an error naming the partition when one fails in a way retrying cannot fix.
func (p *Partitioned[T]) Run(ctx context.Context) error {
	if p.cfg.Client == nil {
		// Without a Client, the partitions run on one of the process's own: a session, a connection
		// for each slot, and the coordinator's.
		c, err := ownClient(&p.cfg, p.opts.Slots+1)
		if err != nil {
			return fmt.Errorf("process %q: %w", p.cfg.Process, err)
		}
		own := p.cfg.ClientConfig
		p.cfg.Client, p.cfg.ClientConfig, p.cursors = c, ClientConfig{}, c.cursors
		defer func() { p.cfg.Client, p.cfg.ClientConfig, p.cursors = nil, own, nil; c.Close() }()
	}
	coord, err := p.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while connecting: a clean stop, as for one stream
		}
		return err
	}
	defer coord.close()
	if err := coord.do(ctx, func(c *pgx.Conn) error {
		if err := p.resolveStart(ctx, c); err != nil {
			return err
		}
		return store.RegisterPartitioned(ctx, c, p.cfg.Process, p.opts.Partitions)
	}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("process %q: %w", p.cfg.Process, err)
	}
	p.log.Info().Int("partitions", p.opts.Partitions).Int("slots", p.opts.Slots).Msg("working partitions")
	if p.cfg.Observer != nil {
		// The logical process is connected once its coordination is: readiness follows it as for one
		// stream, while each partition reports under its own name as this instance works it.
		p.cfg.Observer.Connected(p.cfg.Process, true)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatal := make(chan error, p.opts.Slots)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.countInstances(runCtx, coord) }()
	for w := 0; w < p.opts.Slots; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if err := p.slot(runCtx, coord, w); err != nil {
				fatal <- err
				cancel()
			}
		}(w)
	}
	wg.Wait()
	select {
	case err := <-fatal:
		return err
	default:
		return nil
	}
}

// slot works one partition at a time: it picks a partition no instance owns, works it for as long as it
// keeps it, and picks again. With fewer slots than partitions nobody else works, slots take turns: one
// whose partition is caught up hands it back and moves on to the next.
func (p *Partitioned[T]) slot(ctx context.Context, coord *coordinator, w int) error {
	next := w * p.opts.Partitions / p.opts.Slots
	for ctx.Err() == nil {
		i, ok, err := p.pick(ctx, coord, next)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if wait, refused := p.coordinationRefused(err); refused {
				sleep(ctx, wait)
				continue
			}
			p.log.Warn().Err(err).Msg("could not look for free partitions; retrying")
		} else {
			p.coordinationAccepted()
		}
		if !ok {
			sleep(ctx, p.cfg.PollInterval+time.Duration(rand.Int64N(int64(p.cfg.PollInterval)/2+1)))
			continue
		}
		next = (i + 1) % p.opts.Partitions
		why, err := p.work(ctx, i)
		p.mu.Lock()
		delete(p.working, i)
		balancing := p.owned >= (p.opts.Partitions+p.alive-1)/max(p.alive, 1)
		p.mu.Unlock()
		if err != nil {
			return err
		}
		if why == handedOver && balancing {
			// Leave the partition free for long enough that another instance takes it.
			sleep(ctx, 5*p.cfg.PollInterval+time.Second)
		}
	}
	return nil
}

// work runs the single-stream processor on partition i until it stops, loses the partition or hands it
// over, and says which.
func (p *Partitioned[T]) work(ctx context.Context, i int) (left, error) {
	cfg := p.cfg
	cfg.Process = store.PartitionName(p.cfg.Process, i, p.opts.Partitions)
	cfg.Source.Partition = &inordertype.Partition{Index: i, Count: p.opts.Partitions}
	proc, err := newStream(cfg)
	if err != nil {
		return stopped, err
	}
	proc.cursors = p.cursors    // the partitions of one process share a probe
	proc.connectedBefore = true // its coordinator has: a refusal now is an outage (see credentials.refused)
	counted, why := false, stopped
	proc.hooks = runHooks{
		owned: func() {
			p.mu.Lock()
			p.owned++
			counted = true
			p.mu.Unlock()
		},
		afterBatch: func(owned, idle bool) bool {
			if !owned {
				why = notOwner
				return true
			}
			if give, reason := p.shouldYield(idle); give {
				proc.log.Debug().Str("why", reason).Msg("handing the partition over")
				why = handedOver
				return true
			}
			return false
		},
	}
	err = proc.Run(ctx)
	if counted {
		p.mu.Lock()
		p.owned--
		p.mu.Unlock()
	}
	return why, err
}

// shouldYield tells a partition's processor to hand the partition over: when this instance owns more than
// its share (at most one a second, so that partitions move one by one), or when the partition is caught
// up and another has nobody working it.
func (p *Partitioned[T]) shouldYield(idle bool) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	share := (p.opts.Partitions + p.alive - 1) / max(p.alive, 1)
	if p.owned > share && time.Since(p.lastGive) >= time.Second {
		p.lastGive = time.Now()
		return true, "balance the instances"
	}
	if idle && p.free > 0 {
		p.free-- // one slot moves on per partition waiting
		return true, "caught up while another partition waits"
	}
	return false, ""
}

// pick chooses a partition that no instance owns and no slot of this instance works, searching from
// start on, and reserves it.
func (p *Partitioned[T]) pick(ctx context.Context, coord *coordinator, start int) (int, bool, error) {
	n := p.opts.Partitions
	free, err := p.unowned(ctx, coord)
	if err != nil {
		return 0, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteFree(free)
	for k := range n {
		i := (start + k) % n
		if p.working[i] {
			continue
		}
		for _, f := range free {
			if int(f) == i {
				p.working[i] = true
				p.free--
				return i, true, nil
			}
		}
	}
	return 0, false, nil
}

// noteFree counts the partitions nobody works, from a look at pg_locks. Called with mu held.
func (p *Partitioned[T]) noteFree(free []int32) {
	p.free = 0
	for _, f := range free {
		if !p.working[int(f)] {
			p.free++
		}
	}
}

// coordinationRefused says, once per refusal, that the database refused the credentials of the
// coordinating connection (see credentials.refused), and returns how long to wait before looking again,
// growing with the looks refused; false when err is no such refusal.
func (p *Partitioned[T]) coordinationRefused(err error) (time.Duration, bool) {
	line, ok := dial.CredentialsRefused(err)
	if !ok {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused++
	if line != p.refusal {
		p.refusal = line
		p.log.Error().Msg(line + "; reconnecting until they are accepted")
		if o := p.cfg.Observer; o != nil {
			o.CredentialsRefused(p.cfg.Process, line)
		}
	}
	return backoff(p.refused, 100*time.Millisecond, min(p.cfg.ReconnectMax, refusedRetryMax)), true
}

// coordinationAccepted ends a refusal of the coordinating connection's credentials.
func (p *Partitioned[T]) coordinationAccepted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = 0
	if p.refusal == "" {
		return
	}
	p.refusal = ""
	p.log.Info().Msg("the database accepts the credentials again")
	if o := p.cfg.Observer; o != nil {
		o.CredentialsRefused(p.cfg.Process, "")
	}
}

// unowned lists the partitions no instance owns: no lease runs on their cursor rows, or the owner said it
// holds the partition's advisory lock on its session and no session holds it (that session has ended, so
// a standby takes over at once; see store).
func (p *Partitioned[T]) unowned(ctx context.Context, coord *coordinator) ([]int32, error) {
	var free []int32
	err := coord.do(ctx, func(c *pgx.Conn) (err error) {
		free, err = store.UnownedPartitions(ctx, c, p.cfg.Process, p.opts.Partitions)
		return err
	})
	return free, err
}

// countInstances keeps count of the instances running the process, for the share each should own.
func (p *Partitioned[T]) countInstances(ctx context.Context, coord *coordinator) {
	for {
		var alive int
		err := coord.do(ctx, func(c *pgx.Conn) (err error) {
			alive, err = store.CountCoordinators(ctx, c, p.cfg.Process)
			return err
		})
		free, ferr := p.unowned(ctx, coord)
		p.mu.Lock()
		if err == nil {
			p.alive = max(alive, 1)
		}
		if ferr == nil {
			p.noteFree(free)
		}
		p.mu.Unlock()
		if !sleep(ctx, 2*time.Second) {
			return
		}
	}
}

// coordinator is the instance's one connection for choosing partitions, shared by its slots: a session of
// its Client's (see Client.shared.Session). Its application_name (store.CoordinatorApplicationName) tells
// other instances this one is running the process, and the process's instances lock, which it holds
// shared, tells `inorder repartition` (see store.InstancesLockKey).
type coordinator struct {
	mu      sync.Mutex
	shared  *store.Shared
	name    string // its application_name
	conn    *pgx.Conn
	process string // whose instances lock it holds
}

func (p *Partitioned[T]) connect(ctx context.Context) (*coordinator, error) {
	c := &coordinator{shared: p.cfg.Client.shared, process: p.cfg.Process,
		name: store.CoordinatorApplicationName(p.cfg.Process, p.cfg.Client.Instance())}
	if err := c.do(ctx, func(*pgx.Conn) error { return nil }); err != nil {
		return nil, fmt.Errorf("process %q: %w", p.cfg.Process, err)
	}
	return c, nil
}

// do runs f on the connection, reconnecting first if it was lost.
func (c *coordinator) do(ctx context.Context, f func(*pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.IsClosed() {
		conn, err := c.shared.Session(ctx, c.name)
		if errors.Is(err, store.ErrTransactionPooled) {
			return ErrTransactionPooler
		}
		if err != nil {
			return fmt.Errorf("connect: %w", pooler.Explain(err))
		}
		// Waits only while a repartition commits; the partition count is checked after it.
		if err := store.HoldInstances(ctx, conn, c.process); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return err
		}
		c.conn = conn
	}
	err := f(c.conn)
	if err != nil && store.IsConnectionError(err) {
		_ = c.conn.Close(context.WithoutCancel(ctx))
		c.conn = nil
	}
	return err
}

// resolveStart applies the rule of a new process (see Config.StartFrom) to the process as a whole, once:
// a process that is not registered yet, without StartFrom, on a table that already has rows, is refused.
// Otherwise a partition without a cursor row of its own yet starts where StartFrom says, or at the
// beginning when the process existed or its table was empty.
func (p *Partitioned[T]) resolveStart(ctx context.Context, c *pgx.Conn) error {
	if !p.cfg.StartFrom.IsZero() {
		return nil
	}
	exists, err := store.Registered(ctx, c, p.cfg.Process)
	if err != nil {
		return err
	}
	if !exists {
		t, err := source.Inspect(ctx, c, p.cfg.Source)
		if err != nil {
			return err
		}
		has, err := t.HasRows(ctx, c)
		if err != nil {
			return err
		}
		if has {
			return &StartFromError{Table: t.Qualified}
		}
	}
	p.cfg.StartFrom = inordertype.StartFromBeginning
	return nil
}

// ErrTransactionPooler is returned by a Partitioned runner whose database URL goes through a pooler in
// transaction mode: its instances coordinate through sessions of their own (which count the instances
// and keep `inorder repartition` from splitting a running process), which such a pooler does not keep.
var ErrTransactionPooler = errors.New("a partitioned process coordinates its instances through sessions of their own, " +
	"which a pooler in transaction mode does not keep: give it a direct or session-pooled database URL " +
	"(its partitions' ownership would hold, but the instance count and repartition's check would not)")

func (c *coordinator) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		// Unlocked before the connection closes, so that a repartition right after the stop sees it free.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = store.ReleaseInstances(ctx, c.conn, c.process)
		_ = c.conn.Close(ctx)
	}
}
