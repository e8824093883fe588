// The idle probe, which the processors of one Store share per database (see Store.Prober): while they
// have nothing to read, one connection asks for all of them at once, in one statement, whether any row lies
// after each one's position and whether each one's cursor row changed (an operator's skip, rewind, pause
// or resume). A processor runs a batch, with its horizon, pg_locks and cursor lock, only when the answer
// concerns it, or when its own deadline comes.
//
// Why one per database.
//
// Fifty quiet processes in one service would otherwise send fifty probes every interval. Shared, they
// send one statement per interval, holding fifty index-only EXISTS lookups and fifty primary-key
// lookups: the statement rate of the fleet does not grow with the number of processes.
//
// What a probe decides.
//
// Only when to look, never what to read: a yes wakes the processor, whose next batch reads below its
// horizon as always. A probe that fails wakes every processor waiting on it with the error, and each falls
// back to its poll interval; the next probe connects again.

package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/internal/dial"
)

// probeTimeout bounds one probe statement and the wait for a connection of the pool; a probe that takes
// longer fails (the connection is closed as dead), and its waiters fall back to their poll interval.
const probeTimeout = dial.DefaultTimeout

// probeNoInsert makes a probe statement's transaction say that it inserts into no source table (see
// NoInsertLockKey), so that the transactions horizon of every processor leaves it out. The key is a literal
// in the statement, which has the parameters of its waiters only.
var probeNoInsert = fmt.Sprintf("pg_advisory_xact_lock_shared(%d)::text", NoInsertLockKey)

// ProbeRequest is what one processor waits for.
type ProbeRequest struct {
	// RowsFunc returns an SQL boolean expression saying whether a row the processor could read lies after
	// its position (source.Table.ExistsAfter), with its parameters numbered from n, and their
	// values. Nil means rows are not watched (a halted or paused stream waits for its cursor row only).
	// The prober calls it on its own goroutine, possibly after Wait has returned: it must read nothing the
	// caller goes on to change.
	RowsFunc func(n int) (expr string, args []any)
	// Cursor is the process name of the cursor row to watch, and Version the row version (xmin) the
	// processor last read: a different version wakes it.
	Cursor, Version string
	// Gap is the wait before the first probe; each probe that finds nothing doubles it, up to MaxGap.
	Gap, MaxGap time.Duration
}

// ProbeResult says why Wait returned.
type ProbeResult struct {
	// Rows is true when a row lies after the position, Changed when the cursor row changed, Woken when
	// the wake channel given to Wait received.
	Rows, Changed, Woken bool
	// Gap is the gap the next probe would have waited, for the processor to carry into its next Wait.
	Gap time.Duration
	// Err is the probe's error, if one failed: the processor falls back to its poll interval.
	Err error
}

// Prober probes for every processor of one database in its Store.
type Prober struct {
	key   string
	store *Store
	pool  *pgxpool.Pool // each probe borrows a connection of it
	refs  int           // under store.probeMu

	mu      sync.Mutex
	waiters map[*waiter]struct{}
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type waiter struct {
	req    ProbeRequest
	gap    time.Duration
	due    time.Time
	result chan ProbeResult
}

// Prober returns the prober of the store's processors, on the store's shared pool, starting it if this is
// its first user. The store must have been made over shared connections (New(shared)). Every Prober must
// be matched by a Close.
func (s *Store) Prober() *Prober {
	key := fmt.Sprintf("pool %p", s.shared.Pool())
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if p, ok := s.probers[key]; ok {
		p.refs++
		return p
	}
	p := &Prober{key: key, store: s, refs: 1, pool: s.shared.Pool(), waiters: map[*waiter]struct{}{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if s.probers == nil {
		s.probers = map[string]*Prober{}
	}
	s.probers[key] = p
	go p.loop()
	return p
}

// Close gives up one use of the prober; the last closes its connection.
func (p *Prober) Close() {
	p.store.probeMu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(p.store.probers, p.key)
	}
	p.store.probeMu.Unlock()
	if last {
		close(p.stop)
		<-p.done
	}
}

// Wait probes for req until a probe answers for it, wake receives, ctx ends or d passes, whichever comes
// first. It returns a zero Result (with the gap reached) when nothing happened.
func (p *Prober) Wait(ctx context.Context, req ProbeRequest, d time.Duration, wake <-chan struct{}) ProbeResult {
	w := &waiter{req: req, gap: max(req.Gap, time.Millisecond), result: make(chan ProbeResult, 1)}
	w.due = time.Now().Add(w.gap)
	p.mu.Lock()
	p.waiters[w] = struct{}{}
	p.mu.Unlock()
	p.nudge()
	t := time.NewTimer(d)
	defer t.Stop()
	var r ProbeResult
	select {
	case r = <-w.result:
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
		r.Woken = true
	}
	p.mu.Lock()
	delete(p.waiters, w)
	if r.Gap == 0 {
		r.Gap = w.gap
	}
	p.mu.Unlock()
	return r
}

func (p *Prober) nudge() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop runs the probes: it sleeps until the earliest waiter is due, then probes for every waiter due
// within half its own gap, so that waiters at the same gap fall into step and share statements.
func (p *Prober) loop() {
	defer close(p.done)
	rotation := time.NewTicker(rotateEvery)
	defer rotation.Stop()
	for {
		p.mu.Lock()
		var next time.Time
		for w := range p.waiters {
			if next.IsZero() || w.due.Before(next) {
				next = w.due
			}
		}
		p.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			timer = t.C
		}
		var kicked, rotate bool
		select {
		case <-p.stop:
			return
		case <-p.kick:
			kicked = true
		case <-rotation.C:
			rotate = true
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if rotate {
			p.rotate()
			continue
		}
		if kicked {
			continue
		}

		now := time.Now()
		p.mu.Lock()
		var batch []*waiter
		for w := range p.waiters {
			if !w.due.After(now.Add(w.gap / 2)) {
				batch = append(batch, w)
			}
		}
		p.mu.Unlock()
		if len(batch) > 0 {
			rows, versions, err := p.probePool(batch)
			p.answer(batch, rows, versions, err)
		}
	}
}

// rotateEvery is how often the prober takes a step of the checkpoint tables' rotation (see
// RotateCheckpoints): a few times per rotation period, so that the table that becomes current next is
// empty in time even when a step finds it in use.
const rotateEvery = rotationPeriod / 4

// rotate takes a step of the checkpoint tables' rotation on a connection borrowed from the pool. A step
// that fails is taken again at the next turn; the processors meanwhile append to their tables as before.
func (p *Prober) rotate() {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer p.store.shared.giveBack(c)
	if _, err := RotateCheckpoints(ctx, c.Conn()); err != nil && !answered(err) {
		_ = c.Conn().Close(ctx) // the pool drops it
	}
}

// answered reports whether err is the server's answer (the connection works) rather than a failure to
// reach it.
func answered(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// probePool runs one probe for batch on a connection borrowed from the pool.
func (p *Prober) probePool(batch []*waiter) ([]bool, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	c, err := p.pool.Acquire(ctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("probe: %w", err)
	}
	defer p.store.shared.giveBack(c)
	rows, versions, err := p.probe(c.Conn(), batch)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Conn().Close(ctx) // the pool drops it
		cancel()
	}
	return rows, versions, err
}

// probe runs one statement for batch: per waiter, whether a row lies after its position and its cursor
// row's version.
func (p *Prober) probe(conn *pgx.Conn, batch []*waiter) ([]bool, []string, error) {
	var sql strings.Builder
	var args []any
	sql.WriteString("SELECT " + probeNoInsert)
	for _, w := range batch {
		sql.WriteString(", ")
		if w.req.RowsFunc == nil {
			sql.WriteString("false")
		} else {
			expr, a := w.req.RowsFunc(len(args) + 1)
			args = append(args, a...)
			sql.WriteString(expr)
		}
		args = append(args, w.req.Cursor)
		fmt.Fprintf(&sql, ", (SELECT xmin::text FROM inorder.cursor WHERE process_name = $%d)", len(args))
	}
	found := make([]bool, len(batch))
	versions := make([]pgtype.Text, len(batch))
	var marked string
	dest := make([]any, 0, 2*len(batch)+1)
	dest = append(dest, &marked)
	for i := range batch {
		dest = append(dest, &found[i], &versions[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if err := conn.QueryRow(ctx, sql.String(), args...).Scan(dest...); err != nil {
		return nil, nil, fmt.Errorf("probe: %w", err)
	}
	vs := make([]string, len(batch))
	for i, v := range versions {
		vs[i] = v.String
	}
	return found, vs, nil
}

// answer hands each waiter of batch its result, or schedules its next probe when nothing concerns it.
func (p *Prober) answer(batch []*waiter, rows []bool, versions []string, err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, w := range batch {
		if _, ok := p.waiters[w]; !ok {
			continue // gone meanwhile
		}
		r := ProbeResult{Err: err}
		if err == nil {
			r.Rows = rows[i]
			r.Changed = versions[i] != w.req.Version
		}
		w.gap = min(2*w.gap, max(w.req.MaxGap, w.gap))
		if err == nil && !r.Rows && !r.Changed {
			w.due = now.Add(w.gap)
			continue
		}
		r.Gap = w.gap
		delete(p.waiters, w)
		w.result <- r
	}
}
