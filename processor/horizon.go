package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A row becomes visible when its transaction commits, but its created_at is when it was inserted. A
// reader that moves its position to 12:00:00.200 skips a row inserted at 12:00:00.000 whose transaction
// commits at 12:00:00.300. The horizon is the time below which every row that will ever commit is already
// visible; the processor reads only below it.
//
// It is found by watching the writers. A transaction that inserts into a table holds RowExclusiveLock on
// it from before its created_at default is evaluated (the lock is taken when the statement is parsed or
// its cached plan revalidated; for COPY when it begins) until the transaction ends, and pg_locks, which
// any role may read, lists those holders. A writer that was absent from pg_locks at some instant can only
// create rows after that instant. So for each writer in flight the tracker remembers the last poll at
// which it was not there, and the horizon is the earliest of those instants (and of now), less a small
// guard for clock steps. A writer already present at the first poll has no such instant; it holds the
// horizon until it ends.
//
// The poll is stamped with statement_timestamp(), the instant the statement arrived, which is before
// pg_locks is read: a writer missing from pg_locks took its lock after that instant, so its rows are later.
// (clock_timestamp() would be read after the scan of pg_locks, which takes tens of milliseconds when the
// lock table is crowded; a writer that locked and inserted during the scan would then look absent at a
// time later than its own rows.) The records are read in a later statement, so their snapshot is taken
// after every writer that the poll saw as gone had committed or rolled back.

const horizonSQL = `
	SELECT statement_timestamp(), l.virtualtransaction, coalesce(l.pid, 0)
	FROM (SELECT 1) AS one
	LEFT JOIN pg_locks AS l
	  ON l.locktype = 'relation'
	 AND l.mode = 'RowExclusiveLock'
	 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	 AND (l.relation = $1::oid
	      OR l.relation IN (SELECT relid FROM pg_partition_tree($1::oid::regclass)
	                        UNION ALL SELECT relid FROM pg_partition_ancestors($1::oid::regclass)))
	 AND l.pid IS DISTINCT FROM pg_backend_pid()`

type writer struct {
	pid        int
	firstSeen  time.Time
	lastAbsent time.Time // zero: present since tracking began, when nothing is known of its start
}

// Hold names the writer whose open transaction limits the horizon.
type Hold struct {
	// PID is the writer's backend process id (look it up in pg_stat_activity).
	PID int
	// Since is when the tracker first saw the writer.
	Since time.Time
}

// horizon is the result of one poll.
type horizon struct {
	now time.Time
	// at is the time below which every row is visible; zero when a writer of unknown start blocks all.
	at time.Time
	// hold is the writer that limits at, if any.
	hold *Hold
}

// writerTracker keeps the history of the writers of one source table across polls. It belongs to one
// processor and is used by one goroutine.
type writerTracker struct {
	guard    time.Duration
	lastPoll time.Time
	writers  map[string]*writer
}

func newWriterTracker(guard time.Duration) *writerTracker {
	return &writerTracker{guard: guard, writers: map[string]*writer{}}
}

func (w *writerTracker) poll(ctx context.Context, q pgx.Tx, relid uint32) (horizon, error) {
	rows, err := q.Query(ctx, horizonSQL, relid)
	if err != nil {
		return horizon{}, fmt.Errorf("read writers: %w", err)
	}
	var now time.Time
	present := map[string]int{}
	for rows.Next() {
		var vxid *string
		var pid int32
		if err := rows.Scan(&now, &vxid, &pid); err != nil {
			rows.Close()
			return horizon{}, fmt.Errorf("read writers: %w", err)
		}
		if vxid != nil {
			present[*vxid] = int(pid)
		}
	}
	if err := rows.Err(); err != nil {
		return horizon{}, fmt.Errorf("read writers: %w", err)
	}
	return w.observe(now, present), nil
}

// observe folds one poll (the time it was taken and the writers then present, by virtual transaction id)
// into the history and returns the horizon.
func (w *writerTracker) observe(now time.Time, present map[string]int) horizon {
	for vxid := range w.writers {
		if _, ok := present[vxid]; !ok {
			delete(w.writers, vxid) // it ended: its rows, if committed, are visible to the next statement
		}
	}
	h := horizon{now: now, at: now.Add(-w.guard)}
	var limit *writer
	for vxid, pid := range present {
		wr, ok := w.writers[vxid]
		if !ok {
			wr = &writer{pid: pid, firstSeen: now, lastAbsent: w.lastPoll}
			w.writers[vxid] = wr
		}
		if wr.lastAbsent.IsZero() {
			if limit == nil || !limit.lastAbsent.IsZero() || wr.firstSeen.Before(limit.firstSeen) {
				limit = wr
			}
			h.at = time.Time{}
			continue
		}
		if at := wr.lastAbsent.Add(-w.guard); !h.at.IsZero() && at.Before(h.at) {
			h.at = at
			limit = wr
		}
	}
	if limit != nil {
		h.hold = &Hold{PID: limit.pid, Since: limit.firstSeen}
	}
	w.lastPoll = now
	return h
}

// holdReportAfter is how long a writer must have held the horizon before it is reported: shorter holds
// are the ordinary life of writers.
const holdReportAfter = time.Second

func (p *Processor[T]) noteHold(work context.Context, h horizon) error {
	var pid int
	var since time.Time
	if h.hold != nil && h.now.Sub(h.hold.Since) >= holdReportAfter {
		pid, since = h.hold.PID, h.hold.Since
	}
	if h.hold != nil {
		p.obs.Hold(p.cfg.Process, h.now.Sub(h.hold.Since))
	} else {
		p.obs.Hold(p.cfg.Process, 0)
	}
	if pid != p.holdPID {
		if err := p.cur.SetHold(work, pid, since); err != nil {
			return err
		}
		if pid != 0 {
			p.log.Info().Int("writer_pid", pid).Time("since", since).
				Msg("horizon held by an open writer transaction; records after it wait until it ends")
		} else {
			p.log.Info().Msg("horizon no longer held")
		}
		p.holdPID, p.holdWarned = pid, time.Time{}
	}
	if pid != 0 {
		age := h.now.Sub(since)
		if age >= p.cfg.HoldWarnAfter && time.Since(p.holdWarned) >= p.cfg.HoldWarnAfter {
			p.holdWarned = time.Now()
			p.log.Warn().Int("writer_pid", pid).Time("since", since).Dur("held_for", age).
				Msg("a writer transaction has held the stream for long; if it is idle in transaction " +
					"(see pg_stat_activity for this pid), end it or set idle_in_transaction_session_timeout for writers")
		}
	}
	return nil
}
