package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/internal/store"
)

// Sharing a fleet's work. Every instance of a service runs the same processes, and whoever looks first
// takes a free one: after a rolling restart the instance that came back first owns them all. So an
// instance that owns more than its share of unpartitioned processes hands one over, cleanly, to an
// instance that runs it and owns fewer than its share; and a standby that finds a process free leaves it
// for a moment to an instance of the process that owns fewer than it does. The share is the processes
// the fleet's live instances own, divided by those instances, rounded up (see store.Fleet for who
// counts). Both sides follow the same arithmetic, so a process handed over is never handed back: the
// giver still owns at least the share, the taker at most it.

// fleetShare is how many processes each instance of f should own at most: the processes its instances
// own, divided by the instances, rounded up; 0 for an empty fleet.
func fleetShare(f store.Fleet) int {
	if len(f.Owned) == 0 {
		return 0
	}
	total := 0
	for _, n := range f.Owned {
		total += n
	}
	return (total + len(f.Owned) - 1) / len(f.Owned)
}

// shouldGive reports whether instance me, which owns process, hands it over: me owns more than its share
// and another live instance that runs the process owns fewer than its share.
func shouldGive(f store.Fleet, me, process string) bool {
	share := fleetShare(f)
	if f.Owned[me] <= share {
		return false
	}
	for _, o := range f.Runners[process] {
		if o != me && f.Owned[o] < share {
			return true
		}
	}
	return false
}

// shouldDefer reports whether instance me, standing by for process, leaves it a moment to another live
// instance that runs it and owns fewer processes than me, should it find it free.
func shouldDefer(f store.Fleet, me, process string) bool {
	mine, ok := f.Owned[me]
	if !ok {
		return false // not seen yet: take what is free, as before
	}
	for _, o := range f.Runners[process] {
		if o != me && f.Owned[o] < mine {
			return true
		}
	}
	return false
}

// fleetLookEvery is how old the instance's look at its fleet may be: a third of the lease, at most a
// second.
func (p *Processor[T]) fleetLookEvery() time.Duration { return min(p.cfg.Lease/3, time.Second) }

// fleetPace is the least time between two handovers of one instance, and how long the giver leaves the
// process to the others: long enough for an instance that looks every poll interval to take it (after a
// deferral, if it owns more than another), and for the next look at the fleet to count it there.
func (p *Processor[T]) fleetPace() time.Duration {
	return p.takeDeferral() + 2*p.cfg.PollInterval + p.fleetLookEvery()
}

// takeDeferral is how long a standby that owns more than another instance of the process leaves a free
// process to that one: three looks.
func (p *Processor[T]) takeDeferral() time.Duration { return 3 * p.cfg.PollInterval }

// takeDelay is asked when a standby's look first finds the process free: how long to leave it to another
// instance of the process that owns fewer processes (see shouldDefer), from a look at the fleet no older
// than a poll interval, so that an instance that has just started counts.
func (p *Processor[T]) takeDelay(ctx context.Context) time.Duration {
	f, err := p.fleet.Look(ctx, p.cur, p.cfg.PollInterval)
	if err != nil {
		p.log.Debug().Err(err).Msg("could not look at the fleet")
		return 0
	}
	if shouldDefer(f, p.cur.Instance(), p.cfg.Process) {
		return p.takeDeferral()
	}
	return 0
}

// shareWork hands the process over, after a batch that ended well, when this instance owns more than its
// share and another instance of the process fewer, at most one process per instance per fleetPace. The
// handover is a clean stop's: the position committed, the lease given up; nothing is delivered again. It
// reports whether it handed the process over.
func (p *Processor[T]) shareWork(work context.Context) bool {
	if p.fleet == nil || p.role != roleOwner {
		return false
	}
	me := p.cur.Instance()
	if p.cur.Locked() && !p.fleet.Fresh(p.fleetLookEvery()) {
		// A busy owner keeps the row locked from one batch to the next, and a look at the fleet is made
		// outside that transaction: it decides on a look another process of the instance made, or after
		// a batch that leaves the row unlocked (one that finds nothing new).
		return false
	}
	f, err := p.fleet.Look(work, p.cur, p.fleetLookEvery())
	if err != nil {
		p.log.Debug().Err(err).Msg("could not look at the fleet")
		return false
	}
	if !shouldGive(f, me, p.cfg.Process) || !p.fleet.TryGive(p.fleetPace()) {
		return false
	}
	ev := p.log.Info()
	if err := p.cur.HandOver(work, p.fleetPace()); err != nil {
		ev = p.log.Warn().Err(err)
	}
	ev.Int("owned", f.Owned[me]).Int("share", fleetShare(f)).Int("instances", len(f.Owned)).
		Msg("handed the process over: this instance owns more than its share")
	p.role = roleStandby
	p.obs.Locked(p.cfg.Process, false)
	return true
}

// overShare reports, for a quiet owner between the stretches of its wait, whether this instance owns more
// than its share and may hand a process over now, from the instance's look at its fleet (read again at
// most every fleetLookEvery, for all its processes): the owner then runs a batch, after which shareWork
// hands the process over. A quiet owner otherwise runs a batch of its own only once a lease.
func (p *Processor[T]) overShare(ctx context.Context) bool {
	if p.fleet == nil || p.role != roleOwner || p.cur.Locked() || !p.fleet.MayGive(p.fleetPace()) {
		return false
	}
	f, err := p.fleet.Look(ctx, p.cur, p.fleetLookEvery())
	if err != nil {
		p.log.Debug().Err(err).Msg("could not look at the fleet")
		return false
	}
	return shouldGive(f, p.cur.Instance(), p.cfg.Process)
}
