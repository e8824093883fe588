package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// Reading ahead: while a backlog's batch is delivered, the next one is read on the cursor connection,
// which the delivery does not use (a plain Handler, one record at a time, the position committed once per
// batch). A horizon stays true once found: every row below it that will ever commit was visible to the
// statement that read the batch, and so to every later one. So the next batch is read from the end of
// this one below the same horizon, before this one's position is committed; the next batch takes it if
// the position it starts from is still the end of this one (no failure, no operator's move, no other
// owner in between), and reads anew otherwise. The delivery of one batch and the read of the next then
// overlap, and a backlog costs the time of the slower of the two, not of both.
//
// Everything that uses the connection while a read ahead may run waits for it first (joinAhead): a
// renewal of the lease, a parked record, and whatever ends the batch.

// ahead is a read ahead under way or done.
type ahead[T any] struct {
	from   inordertype.Position // where it reads from: the end of the batch being delivered
	bounds bounds
	done   chan struct{}
	read   readResult[T] // once done
	err    error
}

// readAhead starts reading the batch after items, below horizon, when the batch came back full (a backlog
// lies behind it) and its delivery leaves the connection free.
func (rd *reader[T]) readAhead(work context.Context, items []item[T], horizon time.Time) {
	if !rd.readsAhead || len(items) == 0 || !rd.lastFull {
		return
	}
	a := &ahead[T]{from: items[len(items)-1].pos, bounds: rd.nextBounds(), done: make(chan struct{})}
	rd.ahead = a
	go func() {
		defer close(a.done)
		a.read, a.err = rd.readRows(work, a.from, horizon, a.bounds)
	}()
}

// joinAhead waits for a read ahead under way, so that the connection is free again.
func (rd *reader[T]) joinAhead() {
	if rd.ahead != nil {
		<-rd.ahead.done
	}
}

// takeAhead returns the batch read ahead when it starts at pos, and drops it either way.
func (rd *reader[T]) takeAhead(pos inordertype.Position) ([]item[T], bool) {
	a := rd.ahead
	if a == nil {
		return nil, false
	}
	rd.ahead = nil
	<-a.done
	if a.err != nil || a.from != pos {
		return nil, false
	}
	rd.learn(a.bounds, a.read)
	return a.read.items, true
}
