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
// lookups: the statement rate of the fleet does not grow with the number of processes. The lookups go over
// arrays of the processes' values (see RowsQuestion), so that the statement's text, and the server's work
// to plan it, do not grow with them either: a thousand lookups written out one by one took the server
// hundreds of milliseconds to plan, at every probe, for a few to run.
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
	"reflect"
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
	// RowsFunc returns the question whether a row the processor could read lies after its position
	// (source.Table.ProbeQuestion). Nil means rows are not watched (a halted or paused stream waits for
	// its cursor row only). The prober calls it on its own goroutine, possibly after Wait has returned:
	// it must read nothing the caller goes on to change.
	RowsFunc func() RowsQuestion
	// Cursor is the process name of the cursor row to watch, and Version the row version (xmin) the
	// processor last read: a different version wakes it.
	Cursor, Version string
	// Gap is the wait before the first probe; each probe that finds nothing doubles it, up to MaxGap.
	Gap, MaxGap time.Duration
	// Renew, when set, is the waiting owner's lease, which the probe renews for it (see Renewal); nil
	// leaves the lease to the owner's own batches.
	Renew *Renewal
	// Lost, when set, ends the wait when it closes: the instance's session that holds the owner's advisory
	// lock was lost (see Lease.SessionLost), and the owner's own batch must find out why at once,
	// rather than at its next batch a lease later.
	Lost <-chan struct{}
}

// RowsQuestion is a processor's question of its source for the probe: a condition on w, a row of the
// processor's values. The condition is the same for every processor of one source whose position has the
// same form, and the probe asks it of all of them at once, over the arrays of their values (one array per
// value), so that its statement is planned once however many processors it asks for.
type RowsQuestion struct {
	// Cond is an SQL boolean condition on w.v1, w.v2, ...: the processor's values, in order.
	Cond string
	// Types are the SQL types of the values, and Values the values, one per type.
	Types  []string
	Values []any
}

// Renewal is an owner's lease, renewed by the probe while the owner waits, so that the leases of an
// instance's quiet processes are renewed together, in the statements that probe for them, rather than each
// in a transaction of its own. A renewal rides a probe once it is due, and with it every other renewal of
// that probe that falls due within a sixth of its lease, so that renewals fall into step.
//
// A renewal renews only a lease still owned under its token, and only while the cursor row is as the
// owner last saw it (the version of the request): a row an operator or another instance changed in the
// meantime is not renewed, and the probe's answer that it changed wakes the owner, whose batch renews the
// lease as without the probe. A row locked at that moment is passed over (SKIP LOCKED) and renewed at the
// next probe. With the lease, the renewal says that the instance is there (inorder.instance, as a batch's
// heartbeat does) and folds the position into the row, as an owner's own renewal does.
type Renewal struct {
	// Instance and Token are the owner's, and Lease its lease.
	Instance string
	Token    int64
	Lease    time.Duration
	// ApplicationName names the write of the row, as every write of it is named for its process
	// (Repository.ApplicationName), whichever connection makes it.
	ApplicationName string
	// Due is when the renewal is due: the probes from then on renew the lease.
	Due time.Time
}

// Renewed is a renewal the probe made.
type Renewed struct {
	// Sent is when the statement that renewed the lease was sent: the lease runs at least until Sent plus
	// the lease.
	Sent time.Time
	// Version is the cursor row's version after the renewal, and RowSeq its position_seq: the renewal
	// folds the owner's newest checkpoint entry into the row, as the owner's own renewal does.
	Version string
	RowSeq  int64
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
	// Answered is when the probe's answer came back, by this process's clock: a statement sent after it
	// sees every row the probe saw.
	Answered time.Time
	// Renewed is the last renewal of the lease made for the request (see ProbeRequest.Renew); nil when
	// none was made.
	Renewed *Renewed
}

// Prober probes for every processor of one database in its Store.
type Prober struct {
	key   string
	store *Store
	pool  *pgxpool.Pool // each probe borrows a connection of it
	refs  int           // under store.probeMu

	mu      sync.Mutex
	waiters map[*waiter]struct{}
	// unclaimed are renewals made for waiters gone by the time the probe answered, by cursor: the next
	// Wait of the same tenure from the same row version takes it (see Wait).
	unclaimed map[string]unclaimed
	// missed are the failures of probes whose waiters were gone by the time the probe answered, by cursor:
	// the next Wait of the cursor returns it at once, so that a connection found dead is said by the
	// processor it was probing for even when the probe took longer than that processor's wait.
	missed map[string]error
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// unclaimed is a renewal whose waiter was gone: made under token, from the row version from.
type unclaimed struct {
	token   int64
	from    string
	renewed *Renewed
}

type waiter struct {
	req     ProbeRequest
	gap     time.Duration
	due     time.Time
	result  chan ProbeResult
	renewed *Renewed // the last renewal made for it, under p.mu
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
	if req.Renew != nil {
		rn := *req.Renew // the prober moves its due time on
		req.Renew = &rn
	}
	w := &waiter{req: req, gap: max(req.Gap, time.Millisecond), result: make(chan ProbeResult, 1)}
	w.due = time.Now().Add(w.gap)
	p.mu.Lock()
	if err, ok := p.missed[req.Cursor]; ok {
		delete(p.missed, req.Cursor)
		p.mu.Unlock()
		return ProbeResult{Err: err, Gap: w.gap}
	}
	if u, ok := p.unclaimed[req.Cursor]; ok {
		// The last Wait of this cursor ended while a probe renewed its lease: the row changed for that,
		// and this wait takes it, unless the row was seen again since or the tenure ended.
		delete(p.unclaimed, req.Cursor)
		if req.Renew != nil && u.token == req.Renew.Token && u.from == req.Version {
			w.req.Version, w.renewed = u.renewed.Version, u.renewed
			w.req.Renew.Due = u.renewed.Sent.Add(req.Renew.Lease / 3)
		}
	}
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
	case <-req.Lost:
		r.Woken = true
	}
	p.mu.Lock()
	delete(p.waiters, w)
	if r.Gap == 0 {
		r.Gap = w.gap
	}
	r.Renewed = w.renewed
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
//
// When a probe finds rows for a waiter that had been quiet (its gap at its longest), the next probe asks
// for every waiter that watches rows, at once, rather than each at its own gap: a row that wakes one quiet
// process of a fleet over one source most likely wakes them all, and found in one answer they reach
// their batches together, where they take one poll of the transactions in flight between them (see the
// processor's shared poll) rather than one for each answer. At most one such rush every rushEvery.
func (p *Prober) loop() {
	defer close(p.done)
	rotation := time.NewTicker(rotateEvery)
	defer rotation.Stop()
	var rush bool
	var rushed time.Time
	for {
		p.mu.Lock()
		var next time.Time
		for w := range p.waiters {
			if next.IsZero() || w.due.Before(next) {
				next = w.due
			}
		}
		p.mu.Unlock()
		if rush && !next.IsZero() {
			next = time.Now()
		}
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
			if !w.due.After(now.Add(w.gap/2)) || (rush && w.req.RowsFunc != nil) {
				batch = append(batch, w)
			}
		}
		p.mu.Unlock()
		rush = false
		if len(batch) > 0 {
			a, err := p.probePool(batch)
			if err == nil && now.Sub(rushed) >= rushEvery && quietFound(batch, a) {
				rush, rushed = true, now
			}
			p.answer(batch, a, err)
		}
	}
}

// rushEvery is how often at most a probe asks for every waiter at once (see loop).
const rushEvery = 25 * time.Millisecond

// quietFound reports whether a found rows for a waiter of batch that had been quiet: its gap at its
// longest. (A waiter whose stream is busy comes back at a short gap, and its rows wake nobody else.)
func quietFound(batch []*waiter, a probeAnswer) bool {
	for i, w := range batch {
		if a.rows[i] && w.gap >= w.req.MaxGap {
			return true
		}
	}
	return false
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

// acquireError is a probe's failure to borrow a connection of the pool (all in use), as opposed to the
// failure of its statement.
type acquireError struct{ error }

func (e acquireError) Unwrap() error { return e.error }

// deadConnection reports whether err is a probe statement that went unanswered: its connection is dead
// (see Unanswered), which the processors it probed for must hear of.
func deadConnection(err error) bool {
	var ae acquireError
	return err != nil && errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &ae)
}

// answered reports whether err is the server's answer (the connection works) rather than a failure to
// reach it.
func answered(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// probePool runs one probe for batch on a connection borrowed from the pool.
func (p *Prober) probePool(batch []*waiter) (probeAnswer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	c, err := p.pool.Acquire(ctx)
	cancel()
	if err != nil {
		return probeAnswer{}, fmt.Errorf("probe: %w", acquireError{err})
	}
	defer p.store.shared.giveBack(c)
	a, err := p.probe(c.Conn(), batch)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Conn().Close(ctx) // the pool drops it
		cancel()
	}
	return a, err
}

// probeAnswer is what one probe found: per waiter of its batch, whether a row lies after its position and
// its cursor row's version; and the leases it renewed (see Renewal), by the waiter's index in the batch,
// with the row's version after, and when the statement was sent.
type probeAnswer struct {
	rows     []bool
	versions []string
	renewed  map[int]renewedRow
	sent     time.Time
}

// renewedRow is a cursor row as a probe's renewal left it: its version and position_seq.
type renewedRow struct {
	version string
	seq     int64
}

// renewals picks the waiters of batch whose leases the probe renews at now: none unless one is due, and
// then every one due within a sixth of its lease, so that renewals fall into step and share statements.
func renewals(batch []*waiter, now time.Time) []int {
	var picked []int
	due := false
	for i, w := range batch {
		rn := w.req.Renew
		if rn == nil || now.Before(rn.Due.Add(-rn.Lease/6)) {
			continue
		}
		picked = append(picked, i)
		due = due || !now.Before(rn.Due)
	}
	if !due {
		return nil
	}
	return picked
}

// renewSQL renews the leases of a probe (see Renewal), in the statement's WITH clause: $1 to $5 are arrays
// of the waiters' indexes, process names, tokens, row versions and leases in milliseconds, $6 and $7 of
// their instances and application names. Each row's write is named for its process (SET LOCAL, in the
// row's SET list, which is evaluated before the row's triggers see it), as every write of the row is. The probe's no-insert lock is taken first (marked), so that no processor's horizon counts
// the probe's transaction, which writes, as a possible insert. A row is renewed only while it is owned
// under the token with its lease running, at the version the owner last saw, and not locked.
const renewSQL = `WITH marked AS MATERIALIZED (SELECT %s AS m),
	renew AS MATERIALIZED (
		SELECT r.i, c.process_name, r.lease_ms, r.instance, r.app
		FROM marked, inorder.cursor AS c
		JOIN unnest($1::int[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::text[])
		     AS r(i, process_name, token, version, lease_ms, instance, app)
		  ON c.process_name = r.process_name
		WHERE c.owner_token = r.token AND c.xmin::text = r.version AND c.lease_expires_at > clock_timestamp()
		FOR UPDATE OF c SKIP LOCKED),
	renewed AS (
		UPDATE inorder.cursor AS c
		SET lease_expires_at = clock_timestamp() + r.lease_ms * interval '1 millisecond',
		    owner_instance = (SELECT c.owner_instance WHERE set_config('application_name', r.app, true) IS NOT NULL),
		    ` + foldSet + `, ` + windowSet + `
		FROM renew AS r, inorder.position AS p
		WHERE c.process_name = r.process_name AND p.process_name = c.process_name
		RETURNING r.i, c.xmin::text AS version, c.position_seq),
	beat AS (
		INSERT INTO inorder.instance (process_name, instance, seen_until)
		SELECT process_name, instance, clock_timestamp() + lease_ms * interval '1 millisecond' FROM renew
		ON CONFLICT (process_name, instance) DO UPDATE SET seen_until = EXCLUDED.seen_until)
	SELECT (SELECT m FROM marked),
	       (SELECT coalesce(array_agg(i ORDER BY i), '{}') FROM renewed),
	       (SELECT coalesce(array_agg(version ORDER BY i), '{}') FROM renewed),
	       (SELECT coalesce(array_agg(position_seq ORDER BY i), '{}') FROM renewed)`

// probe runs one statement for batch: per waiter, whether a row lies after its position and its cursor
// row's version; and with them, the renewals due (see Renewal).
func (p *Prober) probe(conn *pgx.Conn, batch []*waiter) (probeAnswer, error) {
	var sql strings.Builder
	var args []any
	renew := renewals(batch, time.Now())
	var marked string
	var renewedIdx []int32
	var renewedVersions []string
	var renewedSeqs []int64
	dest := make([]any, 0, 5)
	if len(renew) == 0 {
		sql.WriteString("SELECT " + probeNoInsert)
		dest = append(dest, &marked)
	} else {
		idx := make([]int32, len(renew))
		names, versions, instances, apps := make([]string, len(renew)), make([]string, len(renew)), make([]string, len(renew)), make([]string, len(renew))
		tokens, leases := make([]int64, len(renew)), make([]int64, len(renew))
		for k, i := range renew {
			w := batch[i]
			idx[k], names[k], versions[k] = int32(i), w.req.Cursor, w.req.Version
			tokens[k], leases[k], instances[k] = w.req.Renew.Token, w.req.Renew.Lease.Milliseconds(), w.req.Renew.Instance
			apps[k] = w.req.Renew.ApplicationName
		}
		fmt.Fprintf(&sql, renewSQL, probeNoInsert)
		args = append(args, idx, names, tokens, versions, leases, instances, apps)
		dest = append(dest, &marked, &renewedIdx, &renewedVersions, &renewedSeqs)
	}
	// Arrays, whatever the number of waiters: an expression per waiter would make a statement that costs
	// the server more to plan than to run, and a column per waiter would end at Postgres' 1,664 columns.
	groups, names := askedRows(batch), make([]string, len(batch))
	for i, w := range batch {
		names[i] = w.req.Cursor
	}
	var found []*[]int32
	for _, g := range groups {
		sql.WriteString(", " + g.sql(len(args)+1))
		args = append(args, g.args()...)
		f := new([]int32)
		found = append(found, f)
		dest = append(dest, f)
	}
	args = append(args, names)
	fmt.Fprintf(&sql, `, (SELECT coalesce(array_agg(c.xmin::text ORDER BY w.i), '{}')
		FROM unnest($%d::text[]) WITH ORDINALITY AS w(process_name, i)
		LEFT JOIN inorder.cursor AS c ON c.process_name = w.process_name)`, len(args))
	versions := make([]pgtype.Text, 0, len(batch))
	dest = append(dest, &versions)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	a := probeAnswer{sent: time.Now()}
	if err := conn.QueryRow(ctx, sql.String(), args...).Scan(dest...); err != nil {
		return probeAnswer{}, fmt.Errorf("probe: %w", err)
	}
	if len(versions) != len(batch) {
		return probeAnswer{}, fmt.Errorf("probe: %d versions for %d waiters", len(versions), len(batch))
	}
	a.rows, a.versions = make([]bool, len(batch)), make([]string, len(batch))
	for i, v := range versions {
		a.versions[i] = v.String
	}
	for _, f := range found {
		for _, i := range *f {
			if i < 0 || int(i) >= len(batch) {
				return probeAnswer{}, fmt.Errorf("probe: an answer for waiter %d of %d", i, len(batch))
			}
			a.rows[i] = true
		}
	}
	if len(renewedIdx) > 0 {
		if len(renewedVersions) != len(renewedIdx) || len(renewedSeqs) != len(renewedIdx) {
			return probeAnswer{}, fmt.Errorf("probe: %d renewals, %d versions and %d positions", len(renewedIdx),
				len(renewedVersions), len(renewedSeqs))
		}
		a.renewed = make(map[int]renewedRow, len(renewedIdx))
		for k, i := range renewedIdx {
			a.renewed[int(i)] = renewedRow{version: renewedVersions[k], seq: renewedSeqs[k]}
		}
	}
	return a, nil
}

// answer hands each waiter of batch its result, or schedules its next probe when nothing concerns it; it
// notes the renewals made for them.
func (p *Prober) answer(batch []*waiter, a probeAnswer, err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, w := range batch {
		if _, ok := p.waiters[w]; !ok {
			if deadConnection(err) {
				if p.missed == nil {
					p.missed = map[string]error{}
				}
				p.missed[w.req.Cursor] = err
			}
			if rr, ok := a.renewed[i]; ok && err == nil {
				// Gone meanwhile, but its lease renewed and its row changed: for its next Wait, or for
				// the one that has begun since.
				p.passOn(w, unclaimed{token: w.req.Renew.Token, from: w.req.Version,
					renewed: &Renewed{Sent: a.sent, Version: rr.version, RowSeq: rr.seq}})
			}
			continue
		}
		r := ProbeResult{Err: err, Answered: now}
		if err == nil {
			r.Rows = a.rows[i]
			r.Changed = a.versions[i] != w.req.Version
			if rr, ok := a.renewed[i]; ok {
				// The row was at the version the waiter knows (the renewal asks for it), and is now at the
				// renewal's: the next probe compares with that.
				w.renewed = &Renewed{Sent: a.sent, Version: rr.version, RowSeq: rr.seq}
				w.req.Version = rr.version
				w.req.Renew.Due = a.sent.Add(w.req.Renew.Lease / 3)
				r.Renewed = w.renewed
			}
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

// passOn hands a renewal made for gone, a waiter gone by the time the probe answered, to the Wait of the
// same tenure that has begun since from the same row version, or keeps it for the next (see Wait).
// Under p.mu.
func (p *Prober) passOn(gone *waiter, u unclaimed) {
	for w := range p.waiters {
		if w.req.Cursor == gone.req.Cursor && w.req.Renew != nil && w.req.Renew.Token == u.token && w.req.Version == u.from {
			w.req.Version, w.renewed = u.renewed.Version, u.renewed
			w.req.Renew.Due = u.renewed.Sent.Add(w.req.Renew.Lease / 3)
			return
		}
	}
	if p.unclaimed == nil {
		p.unclaimed = map[string]unclaimed{}
	}
	p.unclaimed[gone.req.Cursor] = u
}

// rowsGroup is the waiters of a probe that ask one condition (see RowsQuestion), by their index in the
// probe's batch, with their values column by column.
type rowsGroup struct {
	cond  string
	types []string
	index []int32
	cols  [][]any
}

// askedRows groups the questions of batch's waiters that watch rows by condition, in the order each
// condition was first asked.
func askedRows(batch []*waiter) []*rowsGroup {
	var groups []*rowsGroup
	byKey := map[string]*rowsGroup{}
	for i, w := range batch {
		if w.req.RowsFunc == nil {
			continue
		}
		q := w.req.RowsFunc()
		key := q.Cond + "\x00" + strings.Join(q.Types, ",")
		g, ok := byKey[key]
		if !ok {
			g = &rowsGroup{cond: q.Cond, types: q.Types, cols: make([][]any, len(q.Types))}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.index = append(g.index, int32(i))
		for k, v := range q.Values {
			g.cols[k] = append(g.cols[k], v)
		}
	}
	return groups
}

// sql is the group's expression in the probe's statement, its parameters numbered from n: the indexes of
// the waiters for which its condition holds.
func (g *rowsGroup) sql(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "(SELECT coalesce(array_agg(w.i) FILTER (WHERE %s), '{}') FROM unnest($%d::int4[]", g.cond, n)
	for k, typ := range g.types {
		fmt.Fprintf(&b, ", $%d::%s[]", n+1+k, typ)
	}
	b.WriteString(") AS w(i")
	for k := range g.types {
		fmt.Fprintf(&b, ", v%d", k+1)
	}
	b.WriteString("))")
	return b.String()
}

// args are the values of sql's parameters.
func (g *rowsGroup) args() []any {
	args := []any{g.index}
	for _, c := range g.cols {
		args = append(args, typedSlice(c))
	}
	return args
}

// typedSlice is vs as a slice of their Go type ([]time.Time, []string, ...), which pgx encodes as an
// array whatever the protocol, where it cannot encode []any without a statement's described types (as
// behind a pooler that takes no prepared statements). The values of a column share a type (see
// RowsQuestion); vs is returned as it is otherwise.
func typedSlice(vs []any) any {
	if len(vs) == 0 || vs[0] == nil {
		return vs
	}
	t := reflect.TypeOf(vs[0])
	out := reflect.MakeSlice(reflect.SliceOf(t), 0, len(vs))
	for _, v := range vs {
		rv := reflect.ValueOf(v)
		if !rv.IsValid() || rv.Type() != t {
			return vs
		}
		out = reflect.Append(out, rv)
	}
	return out.Interface()
}
