package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/pooler"
)

// The fleet of an instance: the live instances (a row in inorder.instance whose seen_until has not
// passed) that run at least one of the unpartitioned processes it runs, and how many unpartitioned
// processes each owns under a running lease. A processor reads it to share the work: an instance that
// owns more than its share hands a process over to one that owns fewer, and a standby that owns more than
// another instance of the process leaves a free process to that one for a moment (see processor's
// fleet.go for the rule). The partitions of a partitioned process (names holding '#') are balanced by
// their own runner and count for neither.

// Fleet is one look at an instance's fleet.
type Fleet struct {
	// Owned counts, for every live instance that runs one of the processes in Runners, the unpartitioned
	// processes it owns under a lease that has not run out (any process, not only those in Runners).
	Owned map[string]int
	// Runners lists, for every unpartitioned process the instance runs, the live instances that run it,
	// the instance itself included.
	Runners map[string][]string
}

// fleetSQL reads an instance's Fleet ($1 names it): one row per live instance of each of its processes,
// with the processes that instance owns.
const fleetSQL = `
	WITH live AS (
		SELECT process_name, instance FROM inorder.instance
		WHERE seen_until > clock_timestamp() AND strpos(process_name, '#') = 0),
	mine AS (
		SELECT l.process_name, l.instance FROM live AS l
		WHERE l.process_name IN (SELECT process_name FROM live WHERE instance = $1)),
	owned AS (
		SELECT owner_instance AS instance, count(*) AS n FROM inorder.cursor
		WHERE lease_expires_at > clock_timestamp() AND strpos(process_name, '#') = 0
		  AND owner_instance IN (SELECT instance FROM mine)
		GROUP BY owner_instance)
	SELECT m.process_name, m.instance, coalesce(o.n, 0)::int FROM mine AS m LEFT JOIN owned AS o USING (instance)`

// ReadFleet reads the fleet of instance on q.
func ReadFleet(ctx context.Context, q Querier, instance string) (Fleet, error) {
	rows, err := q.Query(ctx, fleetSQL, instance)
	if err != nil {
		return Fleet{}, fmt.Errorf("read the instances of %s's processes: %w", instance, pooler.Explain(err))
	}
	f := Fleet{Owned: map[string]int{}, Runners: map[string][]string{}}
	var process, inst string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&process, &inst, &n}, func() error {
		f.Owned[inst] = n
		f.Runners[process] = append(f.Runners[process], inst)
		return nil
	})
	if err != nil {
		return Fleet{}, fmt.Errorf("read the instances of %s's processes: %w", instance, pooler.Explain(err))
	}
	return f, nil
}

// ReadFleet reads the fleet of the repository's instance on its connection (borrowed from the shared pool
// for the moment it takes, when it has none), within the repository's timeout, outside the row lock's
// transaction: it refuses while the row is locked.
func (r *Repository) ReadFleet(ctx context.Context) (Fleet, error) {
	if r.Session.tx != nil {
		// A failing statement would end the batch's transaction with it.
		return Fleet{}, fmt.Errorf("read the fleet of cursor %q: the row lock is held", r.name)
	}
	if r.Session.pconn == nil {
		// Borrowed for the look, unless the caller (TryLock) holds one already.
		defer r.Session.Detach()
	}
	if err := r.Session.attach(ctx); err != nil {
		return Fleet{}, fmt.Errorf("cursor %q: %w", r.name, err)
	}
	ctx, cancel := r.Session.bounded(ctx)
	defer cancel()
	return ReadFleet(ctx, r.Session.conn, instanceName(r.cfg))
}

// FleetWatch keeps an instance's last look at its fleet for every processor of the instance in one store,
// so that an instance of fifty processes reads it once per interval, not fifty times; and it paces the
// instance's handovers, one at a time.
type FleetWatch struct {
	mu     sync.Mutex
	fleet  Fleet
	looked time.Time // when fleet was read; zero: never, or stale
	gave   time.Time // when the instance last handed a process over
}

// FleetWatch returns the watch shared by the repositories of this one's instance and database in its
// store.
func (r *Repository) FleetWatch() *FleetWatch {
	return r.store.fleetWatch(r.cfg.ConnConfig, instanceName(r.cfg))
}

// fleetWatch returns the watch of instance on cfg's database in this store.
func (s *Store) fleetWatch(cfg *pgx.ConnConfig, instance string) *FleetWatch {
	key := fmt.Sprintf("%s|%d|%s\x00%s", cfg.Host, cfg.Port, cfg.Database, instance)
	s.fleetMu.Lock()
	defer s.fleetMu.Unlock()
	if w, ok := s.fleets[key]; ok {
		return w
	}
	if s.fleets == nil {
		s.fleets = map[string]*FleetWatch{}
	}
	w := &FleetWatch{}
	s.fleets[key] = w
	return w
}

// Look returns the last look at the fleet when it is younger than every, and otherwise looks again
// through r. A look that fails returns the error and keeps the last one for the next caller.
func (w *FleetWatch) Look(ctx context.Context, r *Repository, every time.Duration) (Fleet, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.looked.IsZero() && time.Since(w.looked) < every {
		return w.fleet, nil
	}
	f, err := r.ReadFleet(ctx)
	if err != nil {
		return w.fleet, err
	}
	w.fleet, w.looked = f, time.Now()
	return f, nil
}

// Fresh reports whether the last look at the fleet is younger than every.
func (w *FleetWatch) Fresh(every time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.looked.IsZero() && time.Since(w.looked) < every
}

// MayGive reports whether the instance made no handover within pace: TryGive would reserve one.
func (w *FleetWatch) MayGive(pace time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.gave) >= pace
}

// TryGive reserves the instance's next handover and reports true when none was made within pace; the
// look at the fleet is then out of date, and the next Look reads it again.
func (w *FleetWatch) TryGive(pace time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.gave) < pace {
		return false
	}
	w.gave, w.looked = time.Now(), time.Time{}
	return true
}

// DeferTake makes this instance, while it does not own the process, ask decide when a look first finds
// the process free how long to leave it to other instances (which the fleet's rule prefers), and take it
// only once it has seen it free that long at its looks. nil, or zero from decide, takes it at once.
// decide may read the fleet on the repository (see ReadFleet).
func (r *Lease) DeferTake(decide func(context.Context) time.Duration) { r.takeAfter = decide }

// mayTake reports, when a look found the process free, whether this instance takes it now (see DeferTake
// and HandOver).
func (r *Lease) mayTake(ctx context.Context) bool {
	now := time.Now()
	if now.Before(r.notBefore) {
		return false
	}
	if r.freeSince.IsZero() {
		r.freeSince, r.deferFor = now, 0
		if r.takeAfter != nil {
			r.deferFor = r.takeAfter(ctx)
		}
	}
	if time.Since(r.freeSince) < r.deferFor {
		return false
	}
	r.freeSince = time.Time{}
	return true
}

// HandOver gives the process up cleanly, as a clean stop does, but goes on standing by: it commits the open
// transaction (the position as it stands), unlocks the row, gives up the lease and the advisory lock, and
// takes the process again no sooner than holdOff from now, so that another instance takes it meanwhile.
// The instance stays registered as running the process. Nothing is delivered again: whoever takes the
// process next starts at the committed position.
func (r *Repository) HandOver(ctx context.Context, holdOff time.Duration) error {
	if err := r.Lock.Unlock(ctx); err != nil {
		return err
	}
	if r.Lease.token == 0 {
		return nil // fenced at the commit: the process was someone else's already
	}
	ctx, cancel := r.Session.bounded(ctx)
	defer cancel()
	if err := r.Session.attach(ctx); err != nil {
		return fmt.Errorf("hand cursor %q over: %w", r.name, err)
	}
	defer r.Session.Detach()
	err := r.Lease.giveUpLease(ctx)
	r.Lease.lost()
	r.Lease.giveUpSession(ctx)
	r.Lease.notBefore, r.Lease.freeSince = time.Now().Add(holdOff), time.Time{}
	if err != nil {
		return fmt.Errorf("hand cursor %q over: %w", r.name, pooler.Explain(err))
	}
	return nil
}

// giveUpLease ends this instance's lease in the cursor row, so that a standby takes the process at its
// next look rather than when the lease runs out. The write is named for the process (SET LOCAL, for its
// own statement's transaction), as every write of the row is, whichever connection makes it. The position
// as it stands goes into the row with it (a fold), so that the row alone says where the process stands:
// an instance of the version before the checkpoint log reads only the row.
func (r *Lease) giveUpLease(ctx context.Context) error {
	_, err := r.sess.conn.Exec(ctx, `
		WITH named AS (SELECT set_config('application_name', $3, true))
		UPDATE inorder.cursor AS c
		SET lease_expires_at = NULL, owner_session = false, `+foldSet+`
		FROM named, inorder.position AS p
		WHERE c.process_name = $1 AND c.owner_token = $2 AND p.process_name = c.process_name`,
		r.name, r.token, applicationName(r.name, r.cfg))
	return err
}

// Instance names the instance the repository works the process as.
func (r *Repository) Instance() string { return instanceName(r.cfg) }
