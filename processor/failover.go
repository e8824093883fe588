package processor

import (
	"context"
	"sort"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// A failover promotes a standby that, with asynchronous replication, may not have received the last
// commits of the old primary: the rows they wrote and the positions they moved. A processor reconnecting
// to it finds its cursor row behind what it delivered, and delivers again from there (at least once,
// never a skip). Rows that the failover took back cannot be delivered again, yet the sink has them: after
// every reconnect the processor looks up the records it delivered lately, says once how many will come
// again, and names the ones that no longer exist, so that an operator can reconcile them with the sink. It
// remembers only what it delivered in its current tenure, and forgets what an operator's move or its own
// deliberate move back makes come again.

// deliveredKept is how many of the last delivered records a processor remembers for that check: a few
// seconds of a fast stream, more than asynchronous replication lags behind in the usual case.
const deliveredKept = 4096

// deliveredRecently is how long after its delivery a record is checked even when the server's position
// lies past it: another instance may have moved the position past the place of a record that a failover
// took back (over rows written anew on the promoted server). Older records before the position are left
// alone: an application or a prune may delete rows every process has passed.
const deliveredRecently = time.Minute

// delivered remembers the positions of the last records delivered, and when, oldest first once read.
type delivered struct {
	ring []inordertype.Position
	at   []time.Time
	next int
	full bool
}

func (d *delivered) add(p inordertype.Position, at time.Time) {
	if d.ring == nil {
		d.ring, d.at = make([]inordertype.Position, deliveredKept), make([]time.Time, deliveredKept)
	}
	d.ring[d.next], d.at[d.next] = p, at
	d.next = (d.next + 1) % len(d.ring)
	d.full = d.full || d.next == 0
}

// recentFrom is the index of the first of the delivery times list returned (oldest first) within
// deliveredRecently of now: the recent ones are the rest.
func recentFrom(at []time.Time, now time.Time) int {
	return sort.Search(len(at), func(i int) bool { return now.Sub(at[i]) <= deliveredRecently })
}

// forget drops what is remembered.
func (d *delivered) forget() { d.next, d.full = 0, false }

// list returns what is remembered, oldest first, with when each was delivered. It forgets nothing: the
// caller forgets once it has made use of it.
func (d *delivered) list() ([]inordertype.Position, []time.Time) {
	var out []inordertype.Position
	var at []time.Time
	if d.full {
		out, at = append(out, d.ring[d.next:]...), append(at, d.at[d.next:]...)
	}
	out, at = append(out, d.ring[:d.next]...), append(at, d.at[:d.next]...)
	return out, at
}

// recheck compares, after a reconnect, the records this instance delivered lately with what the server
// has now: the cursor row's position, and the rows. It forgets them only once compared: a look that fails
// (after a failover, a Client's pool may still lend a connection to the old primary, and the next
// reconnect finds the new one) leaves them for the recheck after the next reconnect.
func (p *Processor[T]) recheck(ctx context.Context) {
	ps, deliveredAt := p.tenure.delivered.list()
	if len(ps) == 0 || p.rd.table == nil {
		return
	}
	ctx, cancel := p.cur.Session.Bounded(ctx)
	defer cancel()
	conn, err := p.cur.Session.Conn(ctx)
	if err != nil {
		p.log.Debug().Err(err).Msg("could not compare the delivered records with the server")
		return
	}
	pos, err := store.ReadPosition(ctx, conn, p.cfg.Process)
	if err != nil {
		p.log.Debug().Err(err).Msg("could not compare the delivered records with the server")
		return
	}
	r, err := p.rd.table.Recheck(ctx, conn, pos, ps, recentFrom(deliveredAt, time.Now()))
	if err != nil {
		p.log.Debug().Err(err).Msg("could not compare the delivered records with the server")
		return
	}
	p.tenure.delivered.forget()
	if r.After > 0 {
		p.log.Warn().Str("position", pos.String()).Int("records", r.After).
			Msg("the position on the server is behind records this instance delivered, which are delivered again from " +
				"there: a failover to a standby that missed the last commits, a rewind while this instance was away, or " +
				"a batch cut off before its commit")
	}
	if len(r.Vanished) == 0 {
		return
	}
	ids := make([]string, 0, min(len(r.Vanished), 1000))
	for _, v := range r.Vanished[:cap(ids)] {
		ids = append(ids, v.ID)
	}
	p.log.Error().Strs("records", ids).Int("count", len(r.Vanished)).
		Msg("records this instance delivered no longer exist on the server (commits lost in a failover, or rows " +
			"deleted since): reconcile them with the sink")
}
