package processor

import (
	"context"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// A record's fate. Whatever delivers it (one at a time, the keyed window, an AsyncHandler), what became
// of a record once its handler returned, or once it was found behind a parked key, is decided here, by
// decideFate, and applied by the delivery: the record went through; it failed and the batch stops on it
// (retrying, halted, or waiting for the sink's outage, which fail records in the cursor row); its key
// parks on it (Config.OnHalt); it parks behind its key; or the cursor transaction failed under it.
//
// A record's fate is decided once, when its handler's result is in, and the delivery carries it to the
// batch's end (outcome.fate), where the failing record's failure is recorded. It changes once at most, and
// only one way: when the shutdown timeout has cut the batch off after its failing record's fate was decided
// (the keyed window and the async window wait for what is in flight after it), nothing can be recorded any
// more, and the record is cut off after all (atBatchEnd). A refusal an AsyncHandler's Send returns at once
// is no exception: the record takes its turn, and its fate is decided then (see async.go).
//
// Two paths ask decideFate about an error that is not a record's of the stream as it goes, under rules of
// their own, and pass it only the error and whether the shutdown cut the handler off: a TxBatchHandler's
// call for a whole batch (deliverTxBatch), whose failure, unless it aborts the batch or is cut off, sends
// the batch one record at a time to find the record that fails; and a redrive of a parked key
// (redriveKey), where a record that fails again, whatever its failure, stays parked with its key, and
// neither the sink's outage, HaltAfter nor OnHalt applies. To them every failing fate but fateCutOff is
// alike.

// fateKind is what becomes of a record.
type fateKind int

const (
	// fateDelivered: the record went through; the position moves past it.
	fateDelivered fateKind = iota
	// fateRetry: it failed with an error that may pass; the batch stops on it, and it is retried with
	// backoff, the stream waiting on it.
	fateRetry
	// fateHalt: it failed for good (refused by the sink, or failing for longer than HaltAfter); the batch
	// stops on it, and the stream halts on it.
	fateHalt
	// fateUnavailable: it met the sink's outage (handlers.Unavailable, or a refusal records of different
	// keys met); the batch stops on it, and it is retried with backoff, never halted or parked.
	fateUnavailable
	// fatePark: it failed in a way that would halt the stream, and the stream parks keys: its key parks on
	// it, and the position moves past it.
	fatePark
	// fateParkedBehind: its key is parked: it is parked behind the key without reaching the sink, or
	// whatever the sink said of it, and the position moves past it.
	fateParkedBehind
	// fateCutOff: the shutdown timeout cut its handler off, which is not the record's fault: the batch
	// stops on it, nothing is recorded, and whoever runs the process next delivers it again.
	fateCutOff
	// fateAbort: the cursor transaction itself failed under it (a batchError): the batch ends there and is
	// rolled back.
	fateAbort
)

var fateNames = [...]string{"delivered", "retry", "halt", "unavailable", "park", "parked behind", "cut off", "abort"}

func (k fateKind) String() string { return fateNames[k] }

// fate is what becomes of one record, with the verdict on its failure (none when it went through or parks
// behind its key).
type fate struct {
	kind fateKind
	v    verdict
	// parkOnceHalted says that a halting record of a stream that parks keys halts first and then parks (see
	// decideFate): its failure is recorded as a halt, and its key parks at once.
	parkOnceHalted bool
}

// fails reports whether the batch stops on the record, its position not moved past it: it is the failing
// record, which the batch records (fail) unless the shutdown cut it off.
func (f fate) fails() bool {
	switch f.kind {
	case fateRetry, fateHalt, fateUnavailable, fateCutOff:
		return true
	}
	return false
}

// atBatchEnd is f, the fate of the record its batch failed on, as the batch ends: cut off when the
// shutdown timeout has cut the batch off since f was decided, since nothing can be recorded any more (see
// cutOff).
func (f fate) atBatchEnd(ctx, work context.Context) fate {
	if cutOff(ctx, work) {
		f.kind = fateCutOff
	}
	return f
}

// fateInput is what decides a record's fate: what its handler returned, and where the record and the
// stream stand.
type fateInput struct {
	// err is what the handler returned (an AsyncHandler's Send or its result's Wait); nil: it went through.
	err error
	// behind says that the record's key is parked (or refused earlier in the batch, see asyncWindow): it
	// parks behind the key, whatever err says.
	behind bool
	// cutOff says that the shutdown timeout cut the handler off (see cutOff).
	cutOff bool
	// sinkCheck is what to check when err is the sink's outage rather than the record's failure
	// (executor.sinkCheck), "" otherwise.
	sinkCheck string
	// id and key are the record's.
	id, key string
	// halt is the cursor row's halt state: the record's failures so far when it is the failing record.
	halt *inordertype.Halt
	// parking says that the stream parks keys (OnHaltPark).
	parking bool
	// haltAfter is Config.HaltAfter, and now the time of the failure by the database's clock (see
	// store.Lease.Now), to compare with the first failure the cursor row counts, which that clock
	// stamped: instances that share the row may disagree on the time, the row's clock is one.
	haltAfter time.Duration
	now       time.Time
}

// decideFate decides what becomes of a record. It is pure: the caller applies what it says.
func decideFate(in fateInput) fate {
	v := judge(in.err, in.sinkCheck)
	switch {
	case in.behind:
		return fate{kind: fateParkedBehind}
	case in.err == nil:
		return fate{kind: fateDelivered}
	case isBatchError(in.err):
		return fate{kind: fateAbort, v: v}
	case in.cutOff:
		return fate{kind: fateCutOff, v: v}
	case in.sinkCheck != "":
		return fate{kind: fateUnavailable, v: v} // no key's fault: the stream waits for the sink
	}
	h := in.halt
	if h != nil && h.RecordID != in.id {
		h = nil // the row's halt is another record's
	}
	halting := v.permanent || (h != nil && (!h.HaltedAt.IsZero() || in.now.Sub(h.FirstFailureAt) >= in.haltAfter))
	switch {
	case !halting:
		return fate{kind: fateRetry, v: v}
	case in.parking && in.key != "" && h != nil && h.SinkUnavailable():
		// A record that failed in the sink's outage and is refused now halts first (fail), so that the
		// cursor row no longer says the sink is unavailable, and then parks.
		return fate{kind: fateHalt, v: v, parkOnceHalted: true}
	case in.parking && in.key != "":
		return fate{kind: fatePark, v: v}
	}
	return fate{kind: fateHalt, v: v}
}
