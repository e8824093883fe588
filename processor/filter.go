package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// A process with a filter (Source.Where) reads only the rows the filter keeps: the filter is part of the
// read's condition, so the rows it passes over are never sent, and with a partial index on the filter
// never looked at either. When a read below the horizon comes back with fewer rows than it could have
// (every row below the horizon has then been examined) and nothing to deliver, and some row it passed
// over lies after the position, the position moves to just below the horizon without a handler call,
// committed as any position is: the rows passed over are not read again. It never moves past the
// horizon, behind which a row can still commit.

// checkFilter checks the source's filter at start-up, as a column name is checked, and refuses a filter
// other than the one the process's cursor row recorded when it last ran.
func (rd *reader[T]) checkFilter(ctx context.Context, conn *pgx.Conn, t *source.Table) error {
	if err := t.CheckFilter(ctx, conn); err != nil {
		return err
	}
	recorded, ran, err := rd.cur.Source.RecordedFilter(ctx)
	if err != nil {
		return err
	}
	if ran && recorded != t.Spec.Where {
		return filterChanged(rd.process, recorded, t.Spec.Where)
	}
	return nil
}

// filterChanged is the refusal of a process started with a filter other than the one its position was
// taken under.
func filterChanged(process, recorded, where string) error {
	show := func(f string) string {
		if f == "" {
			return "none (every row)"
		}
		return fmt.Sprintf("%q", f)
	}
	return fatalError{fmt.Errorf("%w: the process's position was taken with the filter %s, and it is started with %s: "+
		"rows the old filter passed over would never be delivered, nor rows delivered be passed; a filter is part of "+
		"what a process is: run the new filter as a new process (another name, with its own start), or start this "+
		"one with its recorded filter", ErrInvalidSource, show(recorded), show(where))}
}

// passOver moves the position of a process with a filter from to just below horizon, when a read found
// nothing to deliver below it and some row lies between: the rows passed over cost no handler call, and
// are not read again. It reports, as finish does, whether the batch ended with the row locked again.
func (p *Processor[T]) passOver(work context.Context, from inordertype.Position, horizon time.Time) (bool, error) {
	to := inordertype.Position{CreatedAt: horizon.Add(-time.Microsecond).UTC()}
	if !from.CreatedAt.Before(to.CreatedAt) {
		return false, nil
	}
	if any, err := p.rd.anyBelow(work, from, horizon); err != nil || !any {
		return false, err
	}
	keep, err := p.checkpoint(work, to, 0, store.InFlight{}, true)
	if err == nil {
		// Told to an observer that can count it: the position moved past rows the filter passed over.
		p.obs.PassedOver(p.cfg.Process)
	}
	return keep && !p.cur.Session.Contended(), err
}

// anyBelow reports whether a row lies after from and below horizon, of those the filter passes over.
func (rd *reader[T]) anyBelow(work context.Context, from inordertype.Position, horizon time.Time) (bool, error) {
	ctx, cancel := rd.cur.Session.Bounded(work)
	sql, args := rd.table.AnyBelowSQL(from, horizon)
	var any bool
	err := rd.cur.Lock.Tx().QueryRow(ctx, sql, args...).Scan(&any)
	cancel()
	if err != nil {
		return false, fmt.Errorf("look for rows the filter passes over in %s: %w", rd.table.Qualified, err)
	}
	return any, nil
}

// passedTo is where the position of a process with a filter moves after a batch that delivered every
// row a read found below horizon (the read came back short of its bounds): past the rows the filter
// passed over up to just below horizon, or last where that is not after it. With a checkpoint per record
// (perRecord) the batch's records moved it already, and the next batch's empty read passes over what is
// left.
func passedTo(last inordertype.Position, horizon time.Time, perRecord bool) inordertype.Position {
	to := inordertype.Position{CreatedAt: horizon.Add(-time.Microsecond).UTC()}
	if perRecord || !last.CreatedAt.Before(to.CreatedAt) {
		return last
	}
	return to
}
