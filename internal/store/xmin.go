// The database's xmin horizon: which transaction ids vacuum may not yet clean past, and who holds it back.
//
// Vacuum removes a dead row version only once no snapshot may still see it: the oldest transaction id that
// a backend holds (its own, or its snapshot's xmin), a prepared transaction, a replication slot or a
// standby's feedback still needs bounds what it may remove, in every table of the database. (This is not
// the stream's horizon of package source, below which a processor reads.) inorder's own bookkeeping does not
// suffer from an old one (positions are appended, see checkpoint.go), but the rows prune deletes from an
// outbox stay as dead rows until it moves on; XminHolders says who holds it, for status, the console and the
// metrics.
//
// Everything it reads is readable by any role: pg_stat_activity (pid, database, user, application name,
// backend_xid and backend_xmin of every session; the state and the times only of the role's own sessions,
// unless it has pg_read_all_stats), pg_stat_replication (the walsenders' pids), pg_prepared_xacts,
// pg_replication_slots, pg_stat_progress_vacuum (its pids) and pg_locks.

package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The kinds of holder of the xmin horizon.
const (
	// XminBackend is a session, of this database or of another one (see xminSQL for which count).
	XminBackend = "backend"
	// XminStandby is a standby's hot_standby_feedback, held by the walsender that serves it (without a slot).
	XminStandby = "standby"
	// XminPrepared is a prepared transaction, which holds its transaction id until COMMIT or ROLLBACK PREPARED.
	XminPrepared = "prepared transaction"
	// XminSlot is a replication slot's xmin: a standby's feedback kept in its slot, even while it is away.
	XminSlot = "replication slot"
)

// XminHolder is one holder of the database's xmin horizon, as the observing role may see it.
type XminHolder struct {
	// Kind is one of XminBackend, XminStandby, XminPrepared and XminSlot.
	Kind string
	// PID is the backend's, the walsender's, or a slot's active_pid; 0 for a prepared transaction and an
	// inactive slot.
	PID int
	// Database is the holder's database; empty for a standby and a physical slot, which hold every one.
	Database string
	// User is the session's role, or a prepared transaction's owner.
	User string
	// Application is the session's application_name, or, for a slot in use, its walsender's.
	Application string
	// State is the session's state ("idle in transaction", ...), empty when hidden; "active" or "inactive"
	// for a slot.
	State string
	// XactStart and QueryStart are when the session's transaction and its latest statement began; zero
	// when hidden or not in a transaction.
	XactStart, QueryStart time.Time
	// StartHidden says that the observing role may not see the session's state and times: it is
	// another role's, and the observer has neither pg_read_all_stats nor that role's privileges.
	StartHidden bool
	// Ours says that the session is in one of inorder's own cursor transactions (it holds the no-insert
	// lock, NoInsertLockKey): each lasts one batch.
	Ours bool
	// GID and Prepared are a prepared transaction's name and when it was prepared.
	GID      string
	Prepared time.Time
	// Slot is a replication slot's name.
	Slot string
	// Xmin is the transaction id it holds: its own or its snapshot's xmin, whichever is older; XminAge is
	// how many transaction ids have been handed out since (age(xid)).
	Xmin    uint32
	XminAge int64
	// OwnXid says that Xmin is the holder's own transaction id (a session that wrote, a prepared
	// transaction) rather than a snapshot's xmin, which may be another's still running: of holders of
	// one id, the one whose own it is comes first.
	OwnXid bool
}

// XminLook is one look at the holders of the xmin horizon.
type XminLook struct {
	// Now is the database's clock at the look, to age the times against.
	Now time.Time
	// Database is the database looked from: the one whose vacuum the holders hold back.
	Database string
	// Holders are those whose transaction id holds this database's horizon, the look's own session left
	// out, oldest first.
	Holders []XminHolder
}

// xminSQL lists who holds the xmin horizon of the database it runs in, one row per holder, oldest first, in
// one statement (so one snapshot of pg_stat_activity). What holds it, as Postgres 14 and later compute it
// (ComputeXidHorizons):
//
//   - a session of this database, by its own transaction id and its snapshot's xmin;
//   - a session of another database by its transaction id only, which every snapshot taken here counts as
//     running: its snapshot alone holds only the shared catalogs, never this database's tables;
//   - a prepared transaction, of any database, by its transaction id, likewise;
//   - a replication slot's xmin and a physical walsender's (a standby's feedback without a slot), which
//     hold every database.
//
// Left out: the look's own session, a parallel worker (its leader is listed), a logical walsender (it holds
// only the catalogs, through its slot's catalog_xmin), and a backend running VACUUM (pg_stat_progress_vacuum,
// autovacuum included), whose xmin vacuum itself ignores. $1 and $2 are NoInsertLockKey's halves, as pg_locks
// shows an advisory lock's key.
const xminSQL = `
	WITH me AS (
		SELECT oid AS datid FROM pg_database WHERE datname = current_database()
	), ours AS (
		SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted AND objsubid = 1
		  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND pid IS NOT NULL
	), sessions AS (
		SELECT a.*, r.pid IS NOT NULL AS walsender,
		       CASE WHEN a.datid = (SELECT datid FROM me) AND a.backend_xid IS NOT NULL AND a.backend_xmin IS NOT NULL
		                 AND age(a.backend_xmin) > age(a.backend_xid) THEN a.backend_xmin
		            WHEN a.datid = (SELECT datid FROM me) OR r.pid IS NOT NULL THEN coalesce(a.backend_xid, a.backend_xmin)
		            ELSE a.backend_xid END AS held
		FROM pg_stat_activity AS a LEFT JOIN pg_stat_replication AS r ON r.pid = a.pid
		WHERE a.pid <> pg_backend_pid()
		  AND a.pid NOT IN (SELECT p.pid FROM pg_stat_progress_vacuum AS p WHERE p.pid IS NOT NULL)
		  AND (a.leader_pid IS NULL OR a.leader_pid = a.pid)
	), holders AS (
		SELECT CASE WHEN s.walsender THEN 'standby' ELSE 'backend' END AS kind, s.pid,
		       coalesce(s.datname, '') AS database, coalesce(s.usename, '') AS usr,
		       coalesce(s.application_name, '') AS app, coalesce(s.state, '') AS state,
		       s.xact_start, s.query_start, s.backend_type IS NULL AS hidden,
		       s.pid IN (SELECT pid FROM ours) AS ours,
		       '' AS gid, NULL::timestamptz AS prepared, '' AS slot, s.held, s.held = s.backend_xid AS own
		FROM sessions AS s
		WHERE s.held IS NOT NULL AND (NOT s.walsender OR s.datid IS NULL)
		UNION ALL
		SELECT 'prepared transaction', 0, p.database, p.owner, '', '', NULL, NULL, false, false,
		       p.gid, p.prepared, '', p.transaction, true
		FROM pg_prepared_xacts AS p
		UNION ALL
		SELECT 'replication slot', coalesce(l.active_pid, 0), coalesce(l.database, ''), '',
		       coalesce(w.application_name, ''), CASE WHEN l.active THEN 'active' ELSE 'inactive' END,
		       NULL, NULL, false, false, '', NULL, l.slot_name, l.xmin, false
		FROM pg_replication_slots AS l LEFT JOIN pg_stat_activity AS w ON w.pid = l.active_pid
		WHERE l.xmin IS NOT NULL
	)
	SELECT statement_timestamp(), current_database(), h.kind, h.pid, h.database, h.usr, h.app, h.state,
	       h.xact_start, h.query_start, h.hidden, h.ours, h.gid, h.prepared, h.slot,
	       h.held::text::bigint, age(h.held)::bigint, coalesce(h.own, false)
	FROM (SELECT 1) AS one LEFT JOIN holders AS h ON true
	ORDER BY age(h.held) DESC NULLS LAST, h.own DESC NULLS LAST, coalesce(h.prepared, h.xact_start) NULLS LAST, h.pid`

// XminHolders looks at who holds the xmin horizon of q's database (see xminSQL): every holder, however
// briefly it has held it, for the caller to time. It reads catalog views only, which any role may read.
func XminHolders(ctx context.Context, q Querier) (XminLook, error) {
	key := uint64(NoInsertLockKey)
	rows, err := q.Query(ctx, xminSQL, int64(key>>32), int64(key&0xffffffff))
	if err != nil {
		return XminLook{}, fmt.Errorf("look at the holders of the xmin horizon: %w", err)
	}
	look, err := scanXmin(rows)
	if err != nil {
		return XminLook{}, fmt.Errorf("look at the holders of the xmin horizon: %w", err)
	}
	return look, nil
}

// scanXmin reads the rows of xminSQL into a look.
func scanXmin(rows pgx.Rows) (XminLook, error) {
	var look XminLook
	defer rows.Close()
	for rows.Next() {
		var (
			kind, db, usr, app, state, gid, slot pgtype.Text
			pid                                  pgtype.Int4
			xactStart, queryStart, prepared      pgtype.Timestamptz
			hidden, ours                         pgtype.Bool
			own                                  bool
			held, age                            pgtype.Int8
		)
		if err := rows.Scan(&look.Now, &look.Database, &kind, &pid, &db, &usr, &app, &state, &xactStart, &queryStart,
			&hidden, &ours, &gid, &prepared, &slot, &held, &age, &own); err != nil {
			return XminLook{}, err
		}
		if !kind.Valid {
			continue // no holder: the one row says when and where
		}
		look.Holders = append(look.Holders, XminHolder{Kind: kind.String, PID: int(pid.Int32), Database: db.String,
			User: usr.String, Application: app.String, State: state.String, XactStart: xactStart.Time,
			QueryStart: queryStart.Time, StartHidden: hidden.Bool, Ours: ours.Bool, GID: gid.String,
			Prepared: prepared.Time, Slot: slot.String, Xmin: uint32(held.Int64), XminAge: age.Int64, OwnXid: own})
	}
	return look, rows.Err()
}
