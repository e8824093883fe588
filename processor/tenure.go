package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// tenure is what this instance knows for one tenure of it as the process's owner. The batch that locks
// the cursor row in a new tenure (lock) starts it afresh in one assignment: whatever happened to the row
// in between was done by other instances (or nobody), not by an operator. A reconnect keeps the tenure
// until then: the check after it (recheck) compares what this instance delivered in the tenure, and the
// next lock, which follows it, starts a new one.
type tenure struct {
	// token is the tenure's (store.Lease.Tenure), and gen counts this instance's tenures: a reconnect
	// may keep the token, never gen.
	token int64
	gen   int64
	// sourceSaved says the cursor row holds what the process reads (saveSource), once per tenure and per
	// connection: a reconnect clears it too.
	sourceSaved bool
	// lastPos is the durable position after this instance's last batch, when knownPos: false before the
	// tenure's first batch, and after a batch that failed.
	lastPos  inordertype.Position
	knownPos bool
	// delivered are the last records this instance delivered in the tenure, for the check after a
	// reconnect (failover.go): the records it delivered before are not its to recheck.
	delivered delivered
	// tried says that this tenure has attempted the failing record the cursor row names: until then the
	// next attempt recorded there is another owner's backoff, which a new owner does not wait out.
	tried bool
}

// lastBatch is what the last batch found that the wait before the next one depends on (nextWait,
// probesRows).
type lastBatch struct {
	// rowBusy says that the cursor row was held for a moment by an operator's action (or a standby looking
	// at it) while this instance owns the process. Run clears it before each batch.
	rowBusy bool
	// lookSoon says that the last poll found a writer just begun limiting the horizon, and heldLong that
	// it found the horizon held by a transaction open for a while; heldFor is for how long (zero: not
	// held). A batch that polls sets them.
	lookSoon, heldLong bool
	heldFor            time.Duration
}

// saveSource records in the cursor row, once per connection, what the process reads, for status and
// operator actions.
func (p *Processor[T]) saveSource(work context.Context) error {
	if p.tenure.sourceSaved {
		return nil
	}
	src := p.rd.table.Spec
	src.Table, src.Horizon = p.rd.table.Qualified, p.hz.kind
	before, changed, err := p.cur.Source.SetSource(work, src)
	if err != nil {
		return err
	}
	if changed && before.Table != "" && before.Where != src.Where {
		return filterChanged(p.cfg.Process, before.Where, src.Where)
	}
	if changed && before.Table != "" && before.Horizon != inordertype.HorizonClock && p.hz.kind == inordertype.HorizonClock {
		if err := p.takeUpClock(work, before.Horizon); err != nil {
			return err
		}
	}
	// Whatever an instance that crashed mid-window left there is not in flight any more.
	if err := p.cur.Position.SetInFlight(work, store.InFlight{}); err != nil {
		return err
	}
	p.tenure.sourceSaved = true
	return nil
}

// takeUpClock moves the position of a process that read its table by created_at (under the horizon
// recorded) back to just before the insert clock was added, when it stands after that, as it first reads
// the table by the clock. A row inserted since may carry a created_at earlier than the position (the
// application wrote it) and an insert clock later than it: reading on from the position by the clock
// would pass it. So what lies between is delivered again, never skipped. A position before the clock
// stays: every row after it by the clock is after it by created_at too, or inserted since.
func (p *Processor[T]) takeUpClock(work context.Context, was inordertype.Horizon) error {
	pos := p.cur.Position.State().Position
	back := inordertype.Position{CreatedAt: p.rd.table.Clock.Since.Add(-p.cfg.InsertLatency).UTC()}
	ev := p.log.Warn().Str("table", p.rd.table.Qualified).Time("clock_since", p.rd.table.Clock.Since).Str("was", string(was))
	if pos.IsBeginning() || !back.CreatedAt.Before(pos.CreatedAt) {
		ev.Str("position", pos.String()).Msg("reading by the insert clock from now on; the position is before the clock, so it stays")
		return nil
	}
	if err := p.moveBack(work, back); err != nil {
		return err
	}
	ev.Str("from", pos.String()).Str("to", back.String()).Msg("reading by the insert clock from now on: delivering " +
		"again from when the clock was added, since rows inserted since may be dated earlier than the position by created_at")
	return nil
}

// followOperator takes in what the cursor row says now (paused, moved, halted, or none of these any
// more), and returns how long to wait before the next batch: while paused, and while a halted record's
// next attempt is not due (at most a poll interval at a time). Zero means go on.
func (p *Processor[T]) followOperator() time.Duration {
	st := p.cur.Position.State()
	if st.Paused {
		if !p.paused {
			p.log.Info().Str("position", st.Position.String()).Msg("paused by an operator; waiting for resume")
			p.paused = true
		}
		return p.wt.rowWatched(idleTicks * p.cfg.PollInterval)
	}
	if p.paused {
		p.log.Info().Msg("resumed by an operator")
		p.paused = false
	}
	if p.tenure.knownPos && st.Position != p.tenure.lastPos {
		p.log.Info().Str("from", p.tenure.lastPos.String()).Str("to", st.Position.String()).
			Msg("position moved by an operator (skip or rewind)")
		p.tracing.operator(p.tenure.lastPos, st.Position)
		p.tenure.delivered.forget() // delivered again from where the operator said, not lost
		p.exec.attempts.forgetAccepted()
	}
	p.failing.note(st.Halt)
	if st.Halt == nil {
		p.tenure.tried = true // what fails from now on, this tenure tries, and backs off from, itself
		return 0
	}
	due := st.Halt.NextAttemptAt
	if due.IsZero() { // recorded before next attempts were
		due = st.Halt.LastFailureAt.Add(p.exec.retryDelay(st.Halt.Attempts, verdict{}))
	}
	if !p.tenure.tried {
		// A new owner tries the record at once: the next attempt recorded is the backoff of the owner
		// before (whose sink, its URL or its key, may have been what failed), not this one's.
		p.tenure.tried = true
		p.failing.nextAt = due
		return 0
	}
	if !p.failing.nextAt.IsZero() && due.Before(p.failing.nextAt) {
		// An operator brought the next attempt forward (cursor.Retry).
		p.log.Info().Str("record", st.Halt.RecordID).Msg("retrying the record now, as an operator asked")
	}
	p.failing.nextAt = due
	// One clock for a wait on a time the cursor row keeps: the database's (Lease.Now, this machine's
	// clock carried on from the offset measured as the row was locked), never this machine's alone, which
	// may be off from the database's by any amount, and from the other instances' that share the row.
	return p.wt.rowWatched(max(0, due.Sub(p.cur.Lease.Now())))
}
