package processor

import "github.com/inorder-dev/inorder/inordertype"

// tenure is what this instance knows for one tenure of it as the process's owner. The batch that locks
// the cursor row in a new tenure (lock) starts it afresh in one assignment: whatever happened to the row
// in between was done by other instances (or nobody), not by an operator. A reconnect keeps the tenure
// until then: the check after it (recheck) compares what this instance delivered in the tenure, and the
// next lock, which follows it, starts a new one.
type tenure[T any] struct {
	// token is the tenure's (store.Repository.Tenure), and gen counts this instance's tenures: a reconnect
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
	// parked are the keys parked in the stream (OnHaltPark): nil until read in this tenure, and again after
	// a batch that may have marked keys whose rows it did not store (see markParked).
	parked map[string]bool
	// ahead is the next batch, read while the last one was delivered (see ahead.go); nil when none. A
	// batch read in another tenure is read again.
	ahead *ahead[T]
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
	// it found the horizon held by a transaction open for a while. A batch that polls sets both.
	lookSoon, heldLong bool
}
