package processor

import (
	"context"
	"time"

	"github.com/rs/zerolog"

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

// sharer is a stream's part in sharing its fleet's work: the instance's look at the instances of its
// processes (fleet), and the handover of the process when this instance owns more than its share.
type sharer struct {
	fleet *store.FleetWatch
	// lease and pollInterval are Config.Lease and PollInterval.
	lease, pollInterval time.Duration
	process             string
	cur                 *store.Repository
	log                 zerolog.Logger
}

// newSharer returns the share of the fleet's work of a processor configured by cfg (its defaults set),
// whose cursor repository cur is open, with the instance's look at its fleet.
func newSharer[T any](cfg *Config[T], fleet *store.FleetWatch, cur *store.Repository, log zerolog.Logger) *sharer {
	return &sharer{fleet: fleet, lease: cfg.Lease, pollInterval: cfg.PollInterval, process: cfg.Process,
		cur: cur, log: log}
}

// lookEvery is how old the instance's look at its fleet may be: a third of the lease, at most a second.
func (s *sharer) lookEvery() time.Duration { return min(s.lease/3, time.Second) }

// pace is the least time between two handovers of one instance, and how long the giver leaves the
// process to the others: long enough for an instance that looks every poll interval to take it (after a
// deferral, if it owns more than another), and for the next look at the fleet to count it there.
func (s *sharer) pace() time.Duration {
	return s.takeDeferral() + 2*s.pollInterval + s.lookEvery()
}

// takeDeferral is how long a standby that owns more than another instance of the process leaves a free
// process to that one: three looks.
func (s *sharer) takeDeferral() time.Duration { return 3 * s.pollInterval }

// takeDelay is asked when a standby's look first finds the process free: how long to leave it to another
// instance of the process that owns fewer processes (see shouldDefer), from a look at the fleet no older
// than a poll interval, so that an instance that has just started counts.
func (s *sharer) takeDelay(ctx context.Context) time.Duration {
	f, err := s.fleet.Look(ctx, s.cur, s.pollInterval)
	if err != nil {
		s.log.Debug().Err(err).Msg("could not look at the fleet")
		return 0
	}
	if shouldDefer(f, s.cur.Instance(), s.process) {
		return s.takeDeferral()
	}
	return 0
}

// shareWork hands the process over, after a batch that ended well, when this instance owns it (the
// caller's to know) and more than its share, and another instance of the process fewer, at most one
// process per instance per pace. The handover is a clean stop's: the position committed, the lease given
// up; nothing is delivered again. It reports whether it handed the process over: this instance stands by
// from then on.
func (s *sharer) shareWork(work context.Context) bool {
	me := s.cur.Instance()
	if s.cur.Lock.Locked() && !s.fleet.Fresh(s.lookEvery()) {
		// A busy owner keeps the row locked from one batch to the next, and a look at the fleet is made
		// outside that transaction: it decides on a look another process of the instance made, or after
		// a batch that leaves the row unlocked (one that finds nothing new).
		return false
	}
	f, err := s.fleet.Look(work, s.cur, s.lookEvery())
	if err != nil {
		s.log.Debug().Err(err).Msg("could not look at the fleet")
		return false
	}
	if !shouldGive(f, me, s.process) || !s.fleet.TryGive(s.pace()) {
		return false
	}
	ev := s.log.Info()
	if err := s.cur.HandOver(work, s.pace()); err != nil {
		ev = s.log.Warn().Err(err)
	}
	ev.Int("owned", f.Owned[me]).Int("share", fleetShare(f)).Int("instances", len(f.Owned)).
		Msg("handed the process over: this instance owns more than its share")
	return true
}

// overShare reports, for a quiet owner between the stretches of its wait (the caller's to know), whether
// this instance owns more than its share and may hand a process over now, from the instance's look at its
// fleet (read again at most every lookEvery, for all its processes): the owner then runs a batch, after
// which shareWork hands the process over. A quiet owner otherwise runs a batch of its own only once a
// lease.
func (s *sharer) overShare(ctx context.Context) bool {
	if s.cur.Lock.Locked() || !s.fleet.MayGive(s.pace()) {
		return false
	}
	f, err := s.fleet.Look(ctx, s.cur, s.lookEvery())
	if err != nil {
		s.log.Debug().Err(err).Msg("could not look at the fleet")
		return false
	}
	return shouldGive(f, s.cur.Instance(), s.process)
}
