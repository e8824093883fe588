package processor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/store"
)

// OnHalt says what a stream does with a record that would halt it (see Config.OnHalt).
type OnHalt string

const (
	// OnHaltHalt halts the stream on the record: every key waits until it goes through or an operator
	// skips it. The default.
	OnHaltHalt OnHalt = "halt"
	// OnHaltPark parks the record's key: the other keys go on, and the key's records wait, in order, for
	// an operator's redrive.
	OnHaltPark OnHalt = "park"
)

// Parking a key. With OnHaltPark, a record that would halt the stream is stored as parked (its row stays
// in the source; the parked table of migration 11 refers to it, with the error), and the position moves
// past it as past a record that succeeded. From then on every record of its key is parked behind it, in
// (created_at, id) order, without reaching the handler, so that nothing of the key overtakes it; the other
// keys go on with the window. The parked keys of a stream are read once per tenure and kept in memory: only the owner
// parks, and an operator's redrive or skip is seen in the cursor row.
//
// A redrive happens in the owner, between two batches, in the goroutine that delivers the stream: the
// key's parked records are delivered one at a time, in order, each removed from the parked table in the
// transaction that commits after it (a transactional handler's writes with it), and the key is unparked
// once none is left. No batch runs meanwhile, and every record of the key up to the position is among the
// parked ones, so a new record of the key (after the position) can only come after them. A crash during a
// redrive delivers again at most the record in flight. A first record that fails again keeps the key
// parked, with the new error, until the next redrive.

// parkedKeys is what a processor knows of the keys parked in its stream.
type parkedKeys struct {
	// on says that the stream parks keys (Config.OnHalt is OnHaltPark).
	on bool
	// checked says the role's privileges on inorder.parked were checked, and readable that it may read it.
	checked, readable bool
	// keys are the keys parked in the stream: nil until read in this tenure, and again after a batch that
	// may have marked keys whose rows it did not store (see mark).
	keys map[string]bool
	cur  *store.Repository // set when the processor opens its cursor
	log  zerolog.Logger
}

// has reports whether key is parked in this stream: a record of it goes behind it. Keys parked before
// are honoured whatever OnHalt says now (an instance started without it, in a rolling deploy): only new
// parking needs OnHaltPark.
func (pk *parkedKeys) has(key string) bool {
	return key != "" && pk.keys[key]
}

// park stores it as parked, in the open cursor transaction: as its key's first record, failed as v says,
// or behind the key's parked records when v holds no error. The key is parked from now on.
func (p *Processor[T]) park(work context.Context, st inordertype.State, it *item[T], v verdict) error {
	p.rd.joinAhead()
	pk := store.Parked{Key: it.rec.Key, Position: it.pos}
	if v.err != nil {
		pk.Error, pk.Permanent, pk.Attempts, pk.Status = store.ClipError(v.err.Error()), v.permanent, it.rec.Attempt, v.status
		if h := st.Halt; h != nil && h.RecordID == it.rec.ID {
			pk.FirstFailureAt = h.FirstFailureAt
		}
	}
	if err := p.cur.Parking.Park(work, pk); err != nil {
		return err
	}
	endSpan(&p.tracing, work, it, "parked", attribute.String("inorder.record.key", pk.Key), attribute.Bool("inorder.parked.first", v.err != nil))
	if v.err == nil {
		return nil
	}
	p.parked.mark(pk.Key)
	p.failing.nextAt = time.Time{}
	p.failing.note(nil) // the stream goes on; the key is what waits now
	p.log.Warn().Str("key", pk.Key).Str("record", it.rec.ID).Int("attempts", it.rec.Attempt).Bool("permanent", pk.Permanent).
		Int("status", pk.Status).Err(v.err).
		Msg("key parked: its records wait in order, the other keys go on; redrive it once the sink accepts it (inorder redrive)")
	return nil
}

// mark parks key in memory: its next records park behind it. The parked record's row is stored by park,
// in the transaction that moves the position past it; a batch that ends otherwise forgets what it marked
// (abort), and the keys are read again.
func (pk *parkedKeys) mark(key string) {
	if pk.keys != nil { // nil: read again at the next batch, this key's committed row with the others
		pk.keys[key] = true
	}
}

// abort rolls the batch's transaction back, with the parked records it stored: the parked keys are read
// again at the next batch.
func (p *Processor[T]) abort(work context.Context) {
	_ = p.cur.Lock.Abort(work)
	p.parked.keys = nil
}

// load reads the stream's parked keys, once per tenure and again after an operator's redrive or
// skip. A role that may not read parked records (granted by hand before parking existed) reads none,
// unless the stream parks: then it is refused at once, saying what to grant.
func (pk *parkedKeys) load(work context.Context) error {
	if !pk.checked {
		read, write, err := pk.cur.Parking.MayPark(work)
		if err != nil {
			return err
		}
		if pk.on && !write {
			return fatalError{store.ErrCannotPark}
		}
		pk.checked, pk.readable = true, read
		if !read {
			pk.log.Warn().Msg(store.CannotReadParked)
		}
	}
	if !pk.readable {
		pk.keys = map[string]bool{}
		return nil
	}
	keys, err := pk.cur.Parking.ParkedKeys(work)
	if err != nil {
		return err
	}
	pk.keys = make(map[string]bool, len(keys))
	for _, k := range keys {
		pk.keys[k] = true
	}
	return nil
}

// followRedrive acts on an operator's redrive request, seen in the cursor row: it delivers the parked
// records of every key asked for, key by key, and reads the parked keys again (a skip may have unparked
// one). It reports false when the stream must stop here (stopping, or the cursor lost).
func (p *Processor[T]) followRedrive(ctx, work context.Context) (bool, error) {
	st := p.cur.Position.State()
	if p.parked.keys == nil {
		if err := p.parked.load(work); err != nil {
			return false, err
		}
		if len(p.parked.keys) > 0 && !p.parked.on {
			p.log.Warn().Int("keys", len(p.parked.keys)).Msg("keys are parked in this stream: their records stay parked " +
				"until a redrive, which this instance does; it parks no new key (it runs with --on-halt halt)")
		}
	}
	if st.RedriveRequestedAt.IsZero() || st.Paused || !p.parked.readable {
		return true, nil
	}
	queue, err := p.cur.Parking.RedriveQueue(work)
	if err != nil {
		return false, err
	}
	for i := 0; i < len(queue); {
		j := i
		for j < len(queue) && queue[j].Key == queue[i].Key {
			j++
		}
		if goOn, err := p.redriveKey(ctx, work, queue[i:j]); err != nil || !goOn {
			return false, err
		}
		i = j
	}
	if err := p.cur.Parking.RedriveSeen(work, st.RedriveRequestedAt); err != nil {
		return false, err
	}
	return true, p.parked.load(work)
}

// redriveKey delivers one key's parked records in order, each removed as it goes through; a record that
// fails ends the key's redrive with the key still parked. It reports false when the stream must stop.
func (p *Processor[T]) redriveKey(ctx, work context.Context, recs []store.Parked) (bool, error) {
	key := recs[0].Key
	for n, pk := range recs {
		if ctx.Err() != nil {
			return false, nil
		}
		it, err := p.rd.readParked(work, pk)
		var cause error
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			cause = fmt.Errorf("record %s is no longer in %s, so it cannot be delivered; skip it (inorder skip "+
				"--record %s) to redrive the rest of key %s", pk.Position.ID, p.rd.table.Qualified, pk.Position.ID, key)
		case err != nil:
			return false, err
		default:
			it.rec.Attempt = pk.Attempts + 1
			cause = p.exec.deliver(work, it)
			if cause != nil {
				endSpan(&p.tracing, work, it, "still parked") // the key stays parked, with the new error
			}
		}
		// The record's fate is decided with the error alone: under a redrive's rules, a record that fails
		// again stays parked with its key, whatever its failure (see fate.go).
		f := decideFate(fateInput{err: cause, cutOff: cutOff(ctx, work)})
		switch f.kind {
		case fateDelivered:
		case fateAbort:
			return false, cause
		case fateCutOff:
			return false, nil
		default: // it failed again (fateRetry, fateHalt)
			pk.Error, pk.Permanent, pk.Status = store.ClipError(cause.Error()), f.v.permanent, f.v.status
			pk.Attempts++ // this attempt, whether the record was handed to the handler or was gone from the table
			if err := p.cur.Parking.RedriveFailed(work, pk); err != nil {
				return false, err
			}
			if ok, err := p.commit(work, 0); err != nil || !ok {
				return false, err
			}
			p.log.Warn().Str("key", key).Str("record", pk.Position.ID).Int("delivered", n).Int("left", len(recs)-n).
				Err(cause).Msg("redrive: the key's first parked record failed again; the key stays parked")
			return true, nil
		}
		if err := p.cur.Parking.Unpark(work, pk); err != nil {
			return false, err
		}
		if ok, err := p.commit(work, 1); err != nil || !ok {
			return false, err
		}
		p.tenure.delivered.add(pk.Position, time.Now())
	}
	delete(p.parked.keys, key)
	p.log.Info().Str("key", key).Int("records", len(recs)).
		Msg("key redriven: its parked records went through in order; the key is unparked")
	return true, nil
}

// readParked reads a parked record's row from the source again.
func (rd *reader[T]) readParked(work context.Context, pk store.Parked) (*item[T], error) {
	sql, args := rd.table.RecordSQL(rd.generic, pk.Position)
	ctx, cancel := rd.cur.Session.Bounded(work)
	defer cancel()
	rows, err := rd.cur.Lock.Tx().Query(ctx, sql, args...)
	if err != nil {
		return nil, rd.refusedRead(fmt.Errorf("read parked record %s of %s: %w", pk.Position.ID, rd.table.Qualified, err))
	}
	r, err := rd.scanItems(rows, 1, math.MaxInt64, false)
	if err != nil {
		return nil, rd.refusedRead(err)
	}
	if len(r.items) == 0 {
		return nil, pgx.ErrNoRows
	}
	return &r.items[0], nil
}

// commit makes a redrive's step durable, the handler flushed first, without moving the position.
func (p *Processor[T]) commit(work context.Context, handled int) (bool, error) {
	if err := p.exec.flush(work); err != nil {
		return false, err
	}
	ok, err := p.cur.Lock.Commit(work, handled)
	if err == nil && !ok && !p.cur.Lease.Owner() {
		p.log.Info().Str("owner", p.cur.Lease.Holder()).Msg("cursor taken by another instance; standing by")
		p.role = roleNone
		p.obs.Locked(p.cfg.Process, false)
	}
	return ok, err
}
