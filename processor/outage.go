package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
)

// refusalMemory is how long a record's refusal is remembered to compare with the refusals of other keys.
const refusalMemory = 30 * time.Second

// refusals tells a sink that refuses every record from a record the sink refuses while it accepts others,
// where the sink itself cannot tell (a status it leaves to the record, a 400 or a 500 to every request):
// the same status for records of different keys, with no record going through in between, is the sink's
// outage, whatever the status. Keys parked for such refusals before the second key showed it was the
// sink's are redriven once the sink accepts again.
type refusals struct {
	mu     sync.Mutex
	recent []refusal
	outage *crossKeyOutage
	// redrive are the keys to redrive now that the outage they were parked in is over.
	redrive []string
}

// refusal is one record's refusal.
type refusal struct {
	key    string
	status int
	// at is when it was noted, by this machine's clock: refusals are compared with each other only, never
	// with a time the database wrote, and they are this instance's own, so the machine's monotonic clock
	// measures their refusalMemory, as the database's clock could not without a round trip.
	at     time.Time
	parked bool
}

// crossKeyOutage is a status that records of different keys met: the sink's. parked are the keys
// parked for it before it was recognised.
type crossKeyOutage struct {
	status int
	parked []string
}

// note takes in one handler result for a record of key.
func (r *refusals) note(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		// A record went through: the refusals so far were the records' own, and an outage is over.
		r.recent = r.recent[:0]
		if r.outage != nil {
			r.redrive = append(r.redrive, r.outage.parked...)
			r.outage = nil
		}
		return
	}
	status, _ := handlers.StatusOf(err)
	if status == 0 || key == "" || unavailable(err) != "" || (r.outage != nil && r.outage.status == status) {
		return
	}
	now := time.Now()
	kept := r.recent[:0]
	for _, x := range r.recent {
		if now.Sub(x.at) < refusalMemory {
			kept = append(kept, x)
		}
	}
	r.recent = kept
	for _, x := range r.recent {
		if x.status == status && x.key != key {
			o := &crossKeyOutage{status: status}
			for _, y := range r.recent {
				if y.parked && y.status == status {
					o.parked = append(o.parked, y.key)
				}
			}
			r.outage, r.recent = o, r.recent[:0]
			return
		}
	}
	r.recent = append(r.recent, refusal{key: key, status: status, at: now})
}

// parked notes that key was parked for its refusal.
func (r *refusals) parked(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.recent {
		if r.recent[i].key == key {
			r.recent[i].parked = true
		}
	}
}

// check says what to check when err is a refusal that records of different keys met (the sink's), and ""
// otherwise.
func (r *refusals) check(err error) string {
	status, _ := handlers.StatusOf(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outage == nil || status == 0 || r.outage.status != status {
		return ""
	}
	return fmt.Sprintf("the sink: records of different keys all meet status %d, so it is not the records' fault "+
		"(its URL, credentials or health)", status)
}

// takeRedrive returns the keys to redrive, once.
func (r *refusals) takeRedrive() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := r.redrive
	r.redrive = nil
	return keys
}

// redriveAfterOutage redrives the keys parked for a sink's refusals before they were recognised as the
// sink's outage, now that the sink accepts again: their records go out in order, as an operator's redrive
// would send them, and the audit trail says who asked. Called while the cursor row is not held.
func (e *executor[T]) redriveAfterOutage(work context.Context) {
	keys := e.refusals.takeRedrive()
	if len(keys) == 0 {
		return
	}
	conn, err := e.cur.Session.Conn(work)
	if err != nil {
		e.refusals.mu.Lock()
		e.refusals.redrive = append(e.refusals.redrive, keys...) // next time
		e.refusals.mu.Unlock()
		return
	}
	defer e.cur.Session.Detach()
	for _, key := range keys {
		_, err := cursor.Redrive(work, conn, e.process, cursor.RedriveOpts{Key: key, ActionOpts: cursor.ActionOpts{
			Actor:  "inorder, after the sink's outage",
			Reason: "parked for a refusal the sink then gave records of every key: its outage is over"}})
		if errors.Is(err, cursor.ErrNotParked) {
			continue // an operator was quicker
		}
		if err != nil {
			e.log.Warn().Err(err).Str("key", key).Msg("could not redrive a key parked during the sink's outage; " +
				"redrive it by hand (inorder redrive)")
			continue
		}
		e.log.Info().Str("key", key).Msg("redriving a key parked during the sink's outage, now over")
	}
}
