package processor

import (
	"context"

	"github.com/inorder-dev/inorder/internal/pooler"
)

// Behind a pooler (PgBouncer, or the pooler of a hosted Postgres) a processor works as on a direct
// connection, with two differences it tells once: ownership rests on the lease alone (a standby cannot see
// that the owner's session ended, so it waits out the lease), and in transaction pooling LISTEN cannot
// work (a notification reaches a server connection, not a client), so Listen gives way to the probe.

// pooling is what a processor has told of the pooler its connection goes through.
type pooling int

const (
	poolingUnknown     pooling = iota // not looked yet
	poolingNone                       // a direct connection
	poolingSession                    // a pooler that keeps a server connection per client, as far as one can tell
	poolingTransaction                // a pooler that hands server connections between clients per transaction
)

// detectPooler looks, once at start, whether the cursor connection goes through a pooler and whether it
// pools by transaction, and says so. It fails only for what the pooler refuses (see pooler.Fatal).
func (p *Processor[T]) detectPooler(ctx context.Context) error {
	pooled, moves := p.cur.Pooled()
	switch {
	case !pooled && !moves:
		p.pooling = poolingNone
		return nil
	case !moves:
		// Asked once for the whole instance, on connections of its Client.
		_, m, err := p.cfg.Client.shared.Pooled(ctx)
		moves = m
		if pooler.Fatal(err) {
			return pooler.Explain(err)
		}
		if err != nil {
			p.log.Debug().Err(err).Msg("could not tell how the pooler pools")
		}
	}
	p.pooling = poolingSession
	if moves {
		p.pooling = poolingTransaction
	}
	p.tellPooler()
	return nil
}

// notePooler tells, once, when the cursor connection turns out to pool by transaction during the run
// (the backend serving it changed between transactions), when the start-up check could not tell.
func (p *Processor[T]) notePooler() {
	if _, moves := p.cur.Pooled(); moves && p.pooling != poolingTransaction {
		p.pooling = poolingTransaction
		p.tellPooler()
	}
}

func (p *Processor[T]) tellPooler() {
	bound := max(p.cfg.Lease, p.cfg.IdleInTransactionTimeout) + p.cfg.PollInterval
	mode := "session"
	if p.pooling == poolingTransaction {
		mode = "transaction"
	}
	p.log.Info().Str("pool_mode", mode).Str("lease", p.cfg.Lease.String()).Str("takeover_within", bound.String()).
		Msg("the database connection goes through a pooler: ownership rests on the lease in the cursor row, " +
			"and a standby replaces a frozen or vanished owner once its lease has run out")
	if p.cfg.Listen && p.pooling == poolingTransaction {
		if p.stopListening != nil {
			p.stopListening()
		}
		p.log.Warn().Msg("--listen needs a session of its own, which a pooler in transaction mode does not keep " +
			"(LISTEN lands on a server connection that other clients then use): not listening; " +
			p.wakeSource() + " instead")
	}
}

// wakeSource says what finds new rows when nothing wakes the processor.
func (p *Processor[T]) wakeSource() string {
	if p.cfg.ProbeInterval > 0 {
		return "the probe finds new rows within " + p.cfg.ProbeInterval.String()
	}
	return "polling finds new rows within " + p.cfg.PollInterval.String()
}

// listens reports whether the processor keeps a listening connection: asked for, and not through a pooler
// in transaction mode.
func (p *Processor[T]) listens() bool { return p.cfg.Listen && p.pooling != poolingTransaction }
