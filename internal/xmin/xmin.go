// Package xmin says who holds the database's xmin horizon, vacuum's, past a threshold: a session (of this
// database, or of another by its transaction id), a prepared transaction, a replication slot or a
// standby's feedback, with what the looking role may see of it, for `inorder status`, `inorder xmin`, the
// console and the metrics. A single look (Look) times what has a start the role may read; a Watch, which
// looks again and again, times the rest from when it first saw them. Everything is read from catalog
// views any role may read.
package xmin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/store"
)

// The database's xmin horizon is the oldest transaction id that something still needs: vacuum removes no
// row version that became dead after it, in any table of the database. A session idle in transaction, a
// report in REPEATABLE READ, a nightly pg_dump, a prepared transaction, a replication slot or a standby's
// hot_standby_feedback holds it for as long as it lasts. (It is not the stream's own horizon, below which a
// processor reads: see docs/horizon.md.) inorder's bookkeeping does not suffer from it, since positions are
// appended rather than rewritten; but the rows cursor.Prune deletes from an outbox stay as dead rows, and the
// table and its indexes grow, until the holder lets go. Look and Watch say who holds it and
// since when.

// DB is what a look reads through: a connection, a pool or a transaction (cursor.DB is one).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// DefaultHoldAfter is how long a holder may hold the xmin horizon before it is reported, when no
// threshold is given.
const DefaultHoldAfter = time.Minute

// HoldCost says what a held xmin horizon costs, for status, the console and the metrics' help.
const HoldCost = "inorder is unaffected (it appends its positions rather than rewriting a row), but vacuum " +
	"cannot remove the rows that became dead since then, anywhere in the database: the rows prune deletes " +
	"from an outbox stay as dead rows, and the table and its indexes grow, until the holder lets go"

// HolderKind says what holds the xmin horizon.
type HolderKind string

// The kinds of holder.
const (
	// Backend is a session: of this database by its transaction id or its snapshot, of another
	// database by its transaction id only (a snapshot of another database holds only the shared catalogs).
	Backend HolderKind = store.XminBackend
	// Standby is a standby's hot_standby_feedback, held by the walsender serving it without a slot.
	Standby HolderKind = store.XminStandby
	// Prepared is a prepared transaction: it holds its transaction id until COMMIT PREPARED or
	// ROLLBACK PREPARED, whatever becomes of the session that prepared it.
	Prepared HolderKind = store.XminPrepared
	// Slot is a replication slot's xmin: a standby's feedback kept in its slot, also while the standby
	// is away.
	Slot HolderKind = store.XminSlot
)

// Since says what an Holder's Since is.
type Since string

const (
	// SinceTransactionStart: the session's transaction began then (xact_start). A transaction's snapshot
	// dates from its first statement in REPEATABLE READ, and from its latest statement in READ COMMITTED,
	// which a single look cannot tell apart; a watch that saw it with an older xmin no longer dates it so.
	SinceTransactionStart Since = "transaction start"
	// SincePrepared: the prepared transaction was prepared then; it held its id from before.
	SincePrepared Since = "prepared"
	// SinceFirstSeen: the watch first saw it holding this transaction id then; it has held it at least
	// since. So it is for what keeps no start the looking role may read: another role's session, when the
	// role has neither pg_read_all_stats nor pg_monitor, a slot, a standby's feedback.
	SinceFirstSeen Since = "first seen"
)

// Holder is one holder of the database's xmin horizon, with what the looking role may see of it.
type Holder struct {
	Kind HolderKind
	// PID is the backend's, the walsender's, or a slot's active_pid; 0 for a prepared transaction and a
	// slot no one uses.
	PID int
	// Database is the holder's database; empty for a standby and a physical slot, which hold every one.
	Database string
	// User is the session's role, or a prepared transaction's owner. Application is the session's
	// application_name, or a slot's walsender's (the standby's name).
	User, Application string
	// State is the session's state ("idle in transaction", "active"); "active" or "inactive" for a slot.
	// XactStart and QueryStart are when its transaction and its latest statement began. The three are
	// empty when StartHidden.
	State                 string
	XactStart, QueryStart time.Time
	// StartHidden says that the looking role may not see the session's state and times: it is another
	// role's, and the looking role has neither its privileges nor pg_read_all_stats (pg_monitor grants it).
	StartHidden bool
	// GID and Prepared are a prepared transaction's name and when it was prepared; Slot a slot's name.
	GID      string
	Prepared time.Time
	Slot     string
	// Xmin is the transaction id it holds, its own (OwnXid: it wrote, or was prepared) or its snapshot's
	// xmin, and XminAge how many transaction ids were handed out since.
	Xmin    uint32
	XminAge int64
	OwnXid  bool
	// Since is when it began holding Xmin, as closely as known, by SinceFrom's rule; Held how long that
	// is, by the database's clock.
	Since     time.Time
	SinceFrom Since
	Held      time.Duration
}

// Hold is a look at the holders of the database's xmin horizon.
type Hold struct {
	// Now is the database's clock at the look; Database the database looked from.
	Now      time.Time
	Database string
	// After is the threshold: Holders are those that have held it longer, the oldest xmin first.
	After   time.Duration
	Holders []Holder
	// Oldest is the holder of the oldest xmin at the look, however briefly it has held it; nil when none.
	// It names a holder whose start the looking role may not see, which a single look cannot time.
	Oldest *Holder
	// Next is how long until the first holder seen under the threshold passes it, if it holds on: when a
	// watch should look again so as to name it on time. Zero when none was seen under it.
	Next time.Duration
}

// Held reports whether a holder has held the xmin horizon past the threshold.
func (h Hold) Held() bool { return len(h.Holders) > 0 }

// Look looks once at who holds the xmin horizon of db's database, and reports those that have held
// it longer than after (zero means DefaultHoldAfter). A single look can time only a session whose
// start the role may read, and a prepared transaction: for the others (another role's session without
// pg_read_all_stats, a slot, a standby's feedback) it names the oldest in Oldest, and an Watch, which
// looks again and again, times them from when it first saw them.
func Look(ctx context.Context, db DB, after time.Duration) (Hold, error) {
	return NewWatch(after).Look(ctx, db)
}

// Watch looks at the holders of the xmin horizon again and again, for a program that runs (the
// console, the metrics), and remembers since when it has seen each holding its transaction id: so it
// times holders whose start a look cannot read, and dates a session whose xmin moved since its previous
// look from then rather than from its transaction's start. It is safe for concurrent use.
type Watch struct {
	after time.Duration

	mu   sync.Mutex
	last time.Time            // the database's clock at the latest look, zero before the first
	seen map[string]time.Time // each holder of the latest look, by xminKey: its Since
}

// NewWatch returns a watch that reports holders past after (zero means DefaultHoldAfter).
func NewWatch(after time.Duration) *Watch {
	if after <= 0 {
		after = DefaultHoldAfter
	}
	return &Watch{after: after, seen: map[string]time.Time{}}
}

// After is the watch's threshold.
func (w *Watch) After() time.Duration { return w.after }

// Look looks at who holds the xmin horizon of db's database now, and reports those that have held it past
// the threshold. inorder's own cursor transactions whose start the role may not see are left out: each
// lasts one batch, and a look that cannot read their start cannot tell one batch from the next. So is a
// holder whose xmin no transaction id has been handed out after: it holds nothing back yet.
func (w *Watch) Look(ctx context.Context, db DB) (Hold, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Hold{}, fmt.Errorf("look at the xmin horizon: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	look, err := store.XminHolders(ctx, tx)
	if err != nil {
		return Hold{}, err
	}
	h := Hold{Now: look.Now, Database: look.Database, After: w.after}
	w.mu.Lock()
	defer w.mu.Unlock()
	first := w.last.IsZero()
	seen := make(map[string]time.Time, len(look.Holders))
	for _, s := range look.Holders {
		if s.Ours && s.StartHidden {
			continue
		}
		x := holderOf(s)
		key := xminKey(s)
		if since, ok := w.seen[key]; ok {
			x.Since = since
		} else {
			x.Since = w.since(s, look.Now, first)
		}
		switch {
		case s.Kind == store.XminPrepared:
			x.SinceFrom = SincePrepared
		case !s.StartHidden && !s.XactStart.IsZero() && x.Since.Equal(s.XactStart):
			x.SinceFrom = SinceTransactionStart
		default:
			x.SinceFrom = SinceFirstSeen
		}
		x.Held = max(0, look.Now.Sub(x.Since))
		seen[key] = x.Since
		if s.XminAge == 0 {
			// No transaction id was handed out after it, so no row can have died since: it holds nothing
			// back yet (a standby's feedback on a quiet database). Remembered, it counts from now once one is.
			continue
		}
		if h.Oldest == nil {
			o := x
			h.Oldest = &o
		}
		if x.Held >= w.after {
			h.Holders = append(h.Holders, x)
		} else if due := w.after - x.Held; h.Next == 0 || due < h.Next {
			h.Next = due
		}
	}
	if look.Now.After(w.last) { // a look that answered after a later one leaves the memory as it is
		w.last, w.seen = look.Now, seen
	}
	return h, nil
}

// since is when a holder the watch had not seen holding its transaction id began to, as closely as known:
// a prepared transaction when it was prepared; a session whose start the role reads, at its first look,
// when its transaction began; otherwise now, when it is first seen (a session not seen holding this id at
// the previous look took it since).
func (w *Watch) since(s store.XminHolder, now time.Time, first bool) time.Time {
	switch {
	case s.Kind == store.XminPrepared && !s.Prepared.IsZero():
		return s.Prepared
	case first && !s.StartHidden && !s.XactStart.IsZero():
		return s.XactStart
	}
	return now
}

// xminKey identifies a holder and the transaction id it holds across looks.
func xminKey(s store.XminHolder) string {
	id := strconv.Itoa(s.PID)
	switch s.Kind {
	case store.XminPrepared:
		id = s.GID
	case store.XminSlot:
		id = s.Slot
	}
	return s.Kind + "\x00" + id + "\x00" + strconv.FormatUint(uint64(s.Xmin), 10)
}

// holderOf is the holder as the store read it, before it is timed.
func holderOf(s store.XminHolder) Holder {
	return Holder{Kind: HolderKind(s.Kind), PID: s.PID, Database: s.Database, User: s.User,
		Application: s.Application, State: s.State, XactStart: s.XactStart, QueryStart: s.QueryStart,
		StartHidden: s.StartHidden, GID: s.GID, Prepared: s.Prepared, Slot: s.Slot, Xmin: s.Xmin,
		XminAge: s.XminAge, OwnXid: s.OwnXid}
}

// Name names the holder as status and the console do: "backend pid 4242 of database app (user report,
// application psql)", "prepared transaction 'nightly' of database app (owner billing)", "replication slot
// 'replica_1' (inactive)", "the hot_standby_feedback of a standby, through walsender pid 812 (application
// replica_1)".
func (x Holder) Name() string {
	db := ""
	if x.Database != "" {
		db = " of database " + x.Database
	}
	var who []string
	if x.User != "" {
		label := "user "
		if x.Kind == Prepared {
			label = "owner "
		}
		who = append(who, label+x.User)
	}
	if x.Application != "" {
		who = append(who, "application "+x.Application)
	}
	paren := ""
	if len(who) > 0 {
		paren = " (" + strings.Join(who, ", ") + ")"
	}
	switch x.Kind {
	case Prepared:
		return fmt.Sprintf("prepared transaction %s%s%s", sqlString(x.GID), db, paren)
	case Slot:
		state := x.State
		if x.PID != 0 {
			state += fmt.Sprintf(", walsender pid %d", x.PID)
		}
		return fmt.Sprintf("replication slot %s (%s)%s%s", sqlString(x.Slot), state, db, paren)
	case Standby:
		return fmt.Sprintf("the hot_standby_feedback of a standby, through walsender pid %d%s", x.PID, paren)
	}
	return fmt.Sprintf("backend pid %d%s%s", x.PID, db, paren)
}

// sqlString is s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// MarshalJSON encodes h as `inorder status --json` prints it under "xmin_hold"; the form is documented in
// docs/operating.md and only ever added to.
func (h Hold) MarshalJSON() ([]byte, error) { return json.Marshal(h.report()) }

// xminHoldJSON is the documented JSON form of an Hold.
type xminHoldJSON struct {
	Database  string           `json:"database"`
	CheckedAt time.Time        `json:"checked_at"`
	After     float64          `json:"threshold_seconds"`
	Held      bool             `json:"held"`
	Holders   []xminHolderJSON `json:"holders"`
	Oldest    *xminHolderJSON  `json:"oldest"`
	Cost      string           `json:"cost,omitempty"`
}

type xminHolderJSON struct {
	Kind        HolderKind `json:"kind"`
	PID         int        `json:"pid"`
	Database    string     `json:"database"`
	User        string     `json:"user"`
	Application string     `json:"application"`
	State       string     `json:"state"`
	XactStart   *time.Time `json:"xact_start"`
	QueryStart  *time.Time `json:"query_start"`
	StartHidden bool       `json:"start_hidden"`
	GID         string     `json:"gid,omitempty"`
	Prepared    *time.Time `json:"prepared_at,omitempty"`
	Slot        string     `json:"slot,omitempty"`
	Xmin        uint32     `json:"xmin"`
	XminAge     int64      `json:"xmin_age"`
	OwnXid      bool       `json:"own_xid"`
	Since       time.Time  `json:"since"`
	SinceFrom   Since      `json:"since_from"`
	Held        float64    `json:"held_seconds"`
}

// report is h in its JSON form.
func (h Hold) report() xminHoldJSON {
	r := xminHoldJSON{Database: h.Database, CheckedAt: h.Now.UTC(), After: h.After.Seconds(), Held: h.Held(),
		Holders: make([]xminHolderJSON, 0, len(h.Holders))}
	for _, x := range h.Holders {
		r.Holders = append(r.Holders, x.report())
	}
	if h.Oldest != nil {
		o := h.Oldest.report()
		r.Oldest = &o
	}
	if r.Held {
		r.Cost = HoldCost
	}
	return r
}

// report is x in its JSON form.
func (x Holder) report() xminHolderJSON {
	return xminHolderJSON{Kind: x.Kind, PID: x.PID, Database: x.Database, User: x.User, Application: x.Application,
		State: x.State, XactStart: timeOrNil(x.XactStart), QueryStart: timeOrNil(x.QueryStart),
		StartHidden: x.StartHidden, GID: x.GID, Prepared: timeOrNil(x.Prepared), Slot: x.Slot, Xmin: x.Xmin,
		XminAge: x.XminAge, OwnXid: x.OwnXid, Since: x.Since.UTC(), SinceFrom: x.SinceFrom, Held: x.Held.Seconds()}
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
