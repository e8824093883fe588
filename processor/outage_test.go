package processor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/processor"
)

// statusError is a sink's refusal with a status, as handlers.StatusOf reads it.
type statusError struct{ code int }

func (e statusError) Error() string   { return "refused" }
func (e statusError) SinkStatus() int { return e.code }

// refuser refuses every record with a 400 while refusing is set, and records what it accepts.
type refuser struct {
	refusing atomic.Bool
	mu       sync.Mutex
	got      []handlers.Record[event]
}

func (r *refuser) Handle(_ context.Context, rec *handlers.Record[event]) error {
	if r.refusing.Load() {
		return handlers.Permanent(statusError{400})
	}
	r.mu.Lock()
	r.got = append(r.got, *rec)
	r.mu.Unlock()
	return nil
}

func (r *refuser) records() []handlers.Record[event] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]handlers.Record[event](nil), r.got...)
}

// TestTheSameRefusalAcrossKeysIsTheSinksOutage: a sink that answers 400 to every record, which one record
// alone would call the record's refusal, refuses records of different keys: that is the sink's outage.
// With parking and a window, at most the key refused first is parked before the second key shows it; the
// stream then waits as sink unavailable, parking nothing more. Once the sink accepts, every record goes
// out once, in order per key, the key parked before is redriven without an operator (audited), and
// nothing stays parked.
func TestTheSameRefusalAcrossKeysIsTheSinksOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := &refuser{}
	h.refusing.Store(true)
	b.cfg.Handler = h
	b.cfg.OnHalt = processor.OnHaltPark
	b.cfg.MaxInFlight, b.cfg.BatchSize = 8, 25
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	ids := b.insertKeys(t, keys, 20)
	start(t, b.cfg)

	ctx := context.Background()
	waitFor(t, "the stream waiting for its sink", func() bool {
		procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
		return err == nil && len(procs) == 1 && procs[0].Info.Status == cursor.StatusSinkUnavailable
	})
	procs, err := cursor.Read(ctx, b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
	require.NoError(t, err)
	require.Contains(t, procs[0].Info.Halt.Unavailable, "records of different keys all meet status 400")
	parked, err := cursor.Parked(ctx, b.db.Pool, b.cfg.Process)
	require.NoError(t, err)
	require.LessOrEqual(t, len(parked), 1, "at most the key refused first, before the second showed the sink's outage")

	h.refusing.Store(false)
	waitFor(t, "every record", func() bool { return len(h.records()) >= len(keys)*20 })
	waitFor(t, "nothing parked", func() bool {
		parked, err := cursor.Parked(ctx, b.db.Pool, b.cfg.Process)
		return err == nil && len(parked) == 0
	})
	got := byKeyOf(h.records())
	for _, k := range keys {
		require.Equal(t, ids[k], got[k], "key %s: every record once, in order", k)
	}
	if len(parked) == 1 {
		entries, err := cursor.Audit(ctx, b.db.Pool, cursor.AuditOpts{Process: b.cfg.Process})
		require.NoError(t, err)
		require.NotEmpty(t, entries)
		require.Equal(t, "redrive", entries[0].Action)
		require.Equal(t, "inorder, after the sink's outage", entries[0].Actor)
	}
}
