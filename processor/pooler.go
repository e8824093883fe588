package processor

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/internal/pooler"
	"github.com/inorder-dev/inorder/internal/store"
)

// Behind a pooler (PgBouncer, or the pooler of a hosted Postgres) a processor works as on a direct
// connection, with two differences it tells once: ownership rests on the lease alone (a standby cannot see
// that the owner's session ended, so it waits out the lease), and in transaction pooling LISTEN cannot
// work (a notification reaches a server connection, not a client), so Listen gives way to the probe.

// poolerWatch tells, once, of the pooler a processor's connection goes through (pooling), and stops the
// processor's listener (stopListening, set while it listens) when the pooler turns out to pool by
// transaction.
type poolerWatch struct {
	pooling       pooling
	stopListening context.CancelFunc
	// listen is Config.Listen; lease, idleTimeout, pollInterval and probeInterval are Config.Lease,
	// IdleInTransactionTimeout, PollInterval and ProbeInterval.
	listen                                          bool
	lease, idleTimeout, pollInterval, probeInterval time.Duration
	cur                                             *store.Repository // set when the processor opens its cursor
	log                                             zerolog.Logger
}

// newPoolerWatch returns the pooler watch of a processor configured by cfg (its defaults set).
func newPoolerWatch[T any](cfg *Config[T], log zerolog.Logger) poolerWatch {
	return poolerWatch{listen: cfg.Listen, lease: cfg.Lease, idleTimeout: cfg.IdleInTransactionTimeout,
		pollInterval: cfg.PollInterval, probeInterval: cfg.ProbeInterval, log: log}
}

// pooling is what a processor has told of the pooler its connection goes through.
type pooling int

const (
	poolingUnknown     pooling = iota // not looked yet
	poolingNone                       // a direct connection
	poolingSession                    // a pooler that keeps a server connection per client, as far as one can tell
	poolingTransaction                // a pooler that hands server connections between clients per transaction
)

// detect looks, once at start, whether the cursor connection goes through a pooler and whether it pools
// by transaction (asking shared, the connections of the processor's Client), and says so. It fails only
// for what the pooler refuses (see pooler.Fatal).
func (pw *poolerWatch) detect(ctx context.Context, shared *store.Shared) error {
	pooled, moves := pw.cur.Session.Pooled()
	switch {
	case !pooled && !moves:
		pw.pooling = poolingNone
		return nil
	case !moves:
		// Asked once for the whole instance, on connections of its Client.
		_, m, err := shared.Pooled(ctx)
		moves = m
		if pooler.Fatal(err) {
			return pooler.Explain(err)
		}
		if err != nil {
			pw.log.Debug().Err(err).Msg("could not tell how the pooler pools")
		}
	}
	pw.pooling = poolingSession
	if moves {
		pw.pooling = poolingTransaction
	}
	pw.tell()
	return nil
}

// note tells, once, when the cursor connection turns out to pool by transaction during the run
// (the backend serving it changed between transactions), when the start-up check could not tell.
func (pw *poolerWatch) note() {
	if _, moves := pw.cur.Session.Pooled(); moves && pw.pooling != poolingTransaction {
		pw.pooling = poolingTransaction
		pw.tell()
	}
}

// tell says what the pooler changes for the processor, and stops its listener in transaction pooling.
func (pw *poolerWatch) tell() {
	bound := max(pw.lease, pw.idleTimeout) + pw.pollInterval
	mode := "session"
	if pw.pooling == poolingTransaction {
		mode = "transaction"
	}
	pw.log.Info().Str("pool_mode", mode).Str("lease", pw.lease.String()).Str("takeover_within", bound.String()).
		Msg("the database connection goes through a pooler: ownership rests on the lease in the cursor row, " +
			"and a standby replaces a frozen or vanished owner once its lease has run out")
	if pw.listen && pw.pooling == poolingTransaction {
		if pw.stopListening != nil {
			pw.stopListening()
		}
		pw.log.Warn().Msg("--listen needs a session of its own, which a pooler in transaction mode does not keep " +
			"(LISTEN lands on a server connection that other clients then use): not listening; " +
			pw.wakeSource() + " instead")
	}
}

// wakeSource says what finds new rows when nothing wakes the processor.
func (pw *poolerWatch) wakeSource() string {
	if pw.probeInterval > 0 {
		return "the probe finds new rows within " + pw.probeInterval.String()
	}
	return "polling finds new rows within " + pw.pollInterval.String()
}

// listens reports whether the processor keeps a listening connection: asked for, and not through a pooler
// in transaction mode.
func (pw *poolerWatch) listens() bool { return pw.listen && pw.pooling != poolingTransaction }
