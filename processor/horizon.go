package processor

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A row becomes visible when its transaction commits, but its created_at is set earlier. A reader that
// moves its position to 12:00:00.200 skips a row dated 12:00:00.000 whose transaction commits at
// 12:00:00.300. The horizon is the time below which every row that will ever commit is already visible;
// the processor reads only below it.
//
// It is found by watching transactions in pg_locks, which any role may read. What must be watched depends
// on what created_at holds:
//
//   - The time of the insert itself (DEFAULT clock_timestamp()): the writers of the table. A transaction
//     that inserts into a table holds RowExclusiveLock on it from before its created_at default is
//     evaluated (the lock is taken when the statement is parsed or its cached plan revalidated; for COPY
//     when it begins) until the transaction ends. HorizonWriters.
//   - The time its transaction began (now(), current_timestamp, transaction_timestamp()) or its statement
//     began (statement_timestamp()): every transaction of the database that could still insert, because
//     a transaction may work for a long time before it first touches the table, and its rows then carry
//     its start. Every transaction holds an ExclusiveLock on its own virtual transaction id from its
//     start to its end. HorizonTransactions.
//
// A transaction absent from pg_locks at some instant can only create rows dated after that instant. So
// for each transaction in flight the tracker remembers the last poll at which it was not there (not there
// as a writer, for HorizonWriters), and the horizon is the earliest of those instants (and of now), less a
// small guard. A transaction already present at the first poll has no such instant; it holds the horizon
// until it ends. A prepared transaction keeps its virtual transaction id in pg_locks (with no pid) until
// COMMIT PREPARED or ROLLBACK PREPARED, so it stays tracked across PREPARE.
//
// The guard covers clock steps and, for transaction time, the few microseconds between the instant a
// statement arrives (which now() reports for the first statement of a transaction) and the lock on its
// virtual transaction id that the server takes right after.
//
// The poll is stamped with statement_timestamp(), the instant the statement arrived, which is before
// pg_locks is read: a transaction missing from pg_locks took its lock after that instant, so its rows are
// later. (clock_timestamp() would be read after the scan of pg_locks, which takes tens of milliseconds
// when the lock table is crowded; a writer that locked and inserted during the scan would then look absent
// at a time later than its own rows.) The records are read in a later statement, so their snapshot is
// taken after every transaction that the poll saw as gone had committed or rolled back.
//
// Left out of the transactions watched, because they cannot insert into the source:
//   - the processor's own session;
//   - sessions of other databases (a transaction cannot write to another database's tables);
//   - the cursor sessions of other processors with a plain handler (application_name "inorder:…"), whose
//     transactions only move their own cursor row; a processor with a transactional handler writes in its
//     cursor transaction and names its session "inorder-tx:…", so it is watched;
//   - backends running VACUUM (pg_stat_progress_vacuum, autovacuum included): VACUUM cannot run inside a
//     transaction block, so the transaction it runs in never inserts.
//
// Everything else is watched: a report, pg_dump, a session idle in transaction, a prepared transaction
// that wrote to the source. They hold such a stream, visibly, until they end.
const horizonSQL = `
	WITH l AS MATERIALIZED (
		SELECT locktype, virtualtransaction, pid, database, relation
		FROM pg_locks
		WHERE (locktype = 'relation' AND mode = 'RowExclusiveLock')
		   OR (locktype = 'virtualxid' AND mode = 'ExclusiveLock')
	), db AS (
		SELECT oid FROM pg_database WHERE datname = current_database()
	)
	SELECT statement_timestamp(),
	       (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef AS d WHERE d.adrelid = $1::oid AND d.adnum = $2::int2),
	       x.writer, x.vxid, x.pid
	FROM (SELECT 1) AS one
	LEFT JOIN (
		SELECT true AS writer, l.virtualtransaction AS vxid, coalesce(l.pid, 0) AS pid
		FROM l
		WHERE l.locktype = 'relation'
		  AND l.database = (SELECT oid FROM db)
		  AND (l.relation = $1::oid
		       OR l.relation IN (SELECT relid FROM pg_partition_tree($1::oid::regclass)
		                         UNION ALL SELECT relid FROM pg_partition_ancestors($1::oid::regclass)))
		  AND l.pid IS DISTINCT FROM pg_backend_pid()
		UNION ALL
		SELECT false, l.virtualtransaction, l.pid
		FROM l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
		WHERE l.locktype = 'virtualxid'
		  AND l.pid <> pg_backend_pid()
		  AND (a.datid IS NULL OR a.datid = (SELECT oid FROM db))
		  AND NOT coalesce(starts_with(a.application_name, 'inorder:'), false)
		  AND l.pid NOT IN (SELECT p.pid FROM pg_stat_progress_vacuum AS p WHERE p.pid IS NOT NULL)
	) AS x ON true`

// observation is one poll of pg_locks: when it was taken, the created_at column's default at that moment,
// and the transactions in flight by virtual transaction id: the writers of the source and every
// transaction watched for transaction time, each with its backend pid (0 for a prepared transaction).
type observation struct {
	now          time.Time
	default_     string
	writers, txs map[string]int
}

func pollLocks(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, t *table) (observation, error) {
	rows, err := q.Query(ctx, horizonSQL, t.oid, t.createdAtNum)
	if err != nil {
		return observation{}, fmt.Errorf("read transactions in flight: %w", err)
	}
	defer rows.Close()
	o := observation{writers: map[string]int{}, txs: map[string]int{}}
	for rows.Next() {
		var def, vxid *string
		var writer *bool
		var pid *int32
		if err := rows.Scan(&o.now, &def, &writer, &vxid, &pid); err != nil {
			return observation{}, fmt.Errorf("read transactions in flight: %w", err)
		}
		if def != nil {
			o.default_ = *def
		}
		if vxid == nil {
			continue
		}
		p := 0
		if pid != nil {
			p = int(*pid)
		}
		if *writer {
			o.writers[*vxid] = p
		} else {
			o.txs[*vxid] = p
		}
	}
	if err := rows.Err(); err != nil {
		return observation{}, fmt.Errorf("read transactions in flight: %w", err)
	}
	return o, nil
}

// txn is what the tracker knows of one transaction in flight.
type txn struct {
	pid       int // 0 once prepared
	firstSeen time.Time
	// lastAbsent is the last poll at which the transaction was not in flight; zero: present since
	// tracking began, when nothing is known of its start.
	lastAbsent time.Time
	// lastNotWriter is the last poll at which it had not written to the source; zero: unknown.
	lastNotWriter time.Time
	writer        bool
}

// Hold names the transaction whose being open limits the horizon.
type Hold struct {
	// PID is its backend process id (look it up in pg_stat_activity); 0 for a prepared transaction (see
	// pg_prepared_xacts).
	PID int
	// Since is when the tracker first saw it.
	Since time.Time
	// Writer reports whether it has written to the source.
	Writer bool
}

// horizon is the result of one poll.
type horizon struct {
	now time.Time
	// at is the time below which every row is visible; zero when a transaction of unknown start blocks all.
	at time.Time
	// hold is the transaction that limits at, if any.
	hold *Hold
}

// tracker keeps the history of the transactions in flight across polls. It tracks both the writers and
// every transaction whatever the horizon in use, so that a switch to HorizonTransactions knows since when
// each transaction has been open. It belongs to one processor and is used by one goroutine.
type tracker struct {
	guard     time.Duration
	firstPoll time.Time
	lastPoll  time.Time
	seen      map[string]*txn
}

func newTracker(guard time.Duration) *tracker {
	return &tracker{guard: guard, seen: map[string]*txn{}}
}

// observe folds one poll into the history and returns the horizon of the given kind.
func (tr *tracker) observe(o observation, kind Horizon) horizon {
	for vxid := range tr.seen {
		_, w := o.writers[vxid]
		_, x := o.txs[vxid]
		if !w && !x {
			delete(tr.seen, vxid) // it ended: its rows, if committed, are visible to the next statement
		}
	}
	note := func(vxid string, pid int, writer bool) {
		e, ok := tr.seen[vxid]
		if !ok {
			e = &txn{pid: pid, firstSeen: o.now, lastAbsent: tr.lastPoll}
			tr.seen[vxid] = e
		}
		if writer && !e.writer {
			// It was not a writer at the last poll (or was not there at all).
			e.lastNotWriter, e.writer = tr.lastPoll, true
		}
		if !ok || writer {
			e.pid = pid // a prepared transaction shows no pid
		}
	}
	for vxid, pid := range o.writers {
		note(vxid, pid, true)
	}
	for vxid, pid := range o.txs {
		if _, w := o.writers[vxid]; !w {
			note(vxid, pid, false)
		}
	}

	h := horizon{now: o.now, at: o.now.Add(-tr.guard)}
	var limit *txn
	var limitFrom time.Time
	for _, e := range tr.seen {
		from := e.lastAbsent
		if kind == HorizonWriters {
			if !e.writer {
				continue
			}
			from = e.lastNotWriter
		}
		if limit == nil || holdsLonger(e, from, limit, limitFrom) {
			limit, limitFrom = e, from
		}
	}
	if limit != nil {
		if limitFrom.IsZero() {
			h.at = time.Time{}
		} else if at := limitFrom.Add(-tr.guard); at.Before(h.at) {
			h.at = at
		} else {
			limit = nil // began after now less the guard: it limits nothing
		}
	}
	if limit != nil {
		h.hold = &Hold{PID: limit.pid, Since: limit.firstSeen, Writer: limit.writer}
	}
	if tr.firstPoll.IsZero() {
		tr.firstPoll = o.now
	}
	tr.lastPoll = o.now
	return h
}

// holdsLonger reports whether a, known absent last at aFrom (zero: unknown), limits the horizon more than
// b: an unknown start first, then the earlier instant. Ties go to the one seen first, then the lower pid,
// so that the hold named in status does not flap between equals from poll to poll.
func holdsLonger(a *txn, aFrom time.Time, b *txn, bFrom time.Time) bool {
	switch {
	case aFrom.IsZero() != bFrom.IsZero():
		return aFrom.IsZero()
	case !aFrom.Equal(bFrom):
		return aFrom.Before(bFrom)
	case !a.firstSeen.Equal(b.firstSeen):
		return a.firstSeen.Before(b.firstSeen)
	}
	return a.pid < b.pid
}

// earliestStart bounds the start of the transactions in flight at the last poll: the earliest instant at
// which one of them was known to be absent, less the guard. The pids of those present since tracking
// began, whose start is unknown, are returned apart (the bound then is the first poll).
func (tr *tracker) earliestStart() (at time.Time, unknown []int) {
	for _, e := range tr.seen {
		from := e.lastAbsent
		if from.IsZero() {
			unknown = append(unknown, e.pid)
			from = tr.firstPoll
		}
		if from = from.Add(-tr.guard); at.IsZero() || from.Before(at) {
			at = from
		}
	}
	sort.Ints(unknown)
	return at, unknown
}

// holdReportAfter is how long a transaction must have held the horizon before it is reported: shorter
// holds are the ordinary life of transactions.
const holdReportAfter = time.Second

func (p *Processor[T]) noteHold(work context.Context, h horizon) error {
	var hold Hold
	if h.hold != nil && h.now.Sub(h.hold.Since) >= holdReportAfter {
		hold = *h.hold
	}
	if h.hold != nil {
		p.obs.Hold(p.cfg.Process, h.now.Sub(h.hold.Since))
	} else {
		p.obs.Hold(p.cfg.Process, 0)
	}
	if hold != p.hold {
		if err := p.cur.SetHold(work, hold.PID, hold.Since); err != nil {
			return err
		}
		if !hold.Since.IsZero() {
			p.log.Info().Int("pid", hold.PID).Time("since", hold.Since).Str("horizon", string(p.kind)).
				Msg(holderName(hold) + " holds the horizon; records after its start wait until it ends")
		} else {
			p.log.Info().Msg("horizon no longer held")
		}
		p.hold, p.holdWarned = hold, time.Time{}
	}
	if !hold.Since.IsZero() {
		age := h.now.Sub(hold.Since)
		if age >= p.cfg.HoldWarnAfter && time.Since(p.holdWarned) >= p.cfg.HoldWarnAfter {
			p.holdWarned = time.Now()
			p.log.Warn().Int("pid", hold.PID).Time("since", hold.Since).Dur("held_for", age).
				Str("horizon", string(p.kind)).Msg(p.holdAdvice(hold))
		}
	}
	return nil
}

func holderName(h Hold) string {
	switch {
	case h.PID == 0:
		return "a prepared transaction"
	case h.Writer:
		return "an open writer transaction"
	default:
		return "an open transaction"
	}
}

// holdAdvice says what to do about a long hold.
func (p *Processor[T]) holdAdvice(h Hold) string {
	var b strings.Builder
	b.WriteString(holderName(h) + " has held the stream for long; ")
	if h.PID == 0 {
		b.WriteString("finish it with COMMIT PREPARED or ROLLBACK PREPARED (see pg_prepared_xacts)")
	} else {
		fmt.Fprintf(&b, "if it is idle in transaction (SELECT state, query FROM pg_stat_activity WHERE pid = %d), "+
			"end it, or set idle_in_transaction_session_timeout", h.PID)
	}
	if p.kind == HorizonTransactions {
		fmt.Fprintf(&b, "; with created_at set to the transaction's start every open transaction in the database "+
			"holds this stream, not only the table's writers: %s", p.table.clockFix())
	}
	return b.String()
}
