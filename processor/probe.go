package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The probe: when there was nothing to read, instead of sleeping a whole poll interval the processor asks,
// at short intervals, whether any row lies after its position at all: one index-only statement on its own
// connection, outside any transaction, without reading pg_locks. Only when it answers yes does the
// processor run a batch (the lock, the horizon, the read). A probe only decides when to look, never what
// is read: the horizon still decides that, so a row the horizon holds is not read however often the probe
// sees it.
//
// The interval starts at probeFirst after records were handled and doubles up to the probe interval
// (Config.ProbeInterval); after a stream has had nothing for probeQuietAfter it grows to four times that,
// so that many quiet processes cost little. While a transaction that has been open for a while holds the
// horizon, the probe would see rows the horizon holds and answer yes again and again: the processor then
// waits its poll interval as without a probe.
const (
	probeFirst      = 2 * time.Millisecond
	probeQuietAfter = 10 * time.Second
)

// probe reports whether a row lies after the position the last batch left.
func (p *Processor[T]) probe(ctx context.Context) (bool, error) {
	pos := p.cur.State().Position
	cond, args := p.table.After(pos, "", 1)
	// Only rows a batch could read now: not rows dated in the future, nor within the insert-latency
	// margin (a batch would not read them yet), nor a NULL created_at (which no batch reads): a yes for
	// those would run batch after batch that read nothing.
	cond += fmt.Sprintf(" AND %s < clock_timestamp() - $%d::interval", pgx.Identifier{p.table.Spec.CreatedAtColumn}.Sanitize(), len(args)+1)
	args = append(args, p.cfg.InsertLatency)
	if p.table.Part != nil {
		cond += fmt.Sprintf(" AND %s = %d", p.table.PartExpr(""), p.table.Part.Index)
	}
	// Not cut short by a stop: a query interrupted by its context closes the connection, and with it the
	// clean release of the process (unlock, then close) that lets a standby take over at once.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var found bool
	err := p.cur.Conn().QueryRow(qctx, "SELECT EXISTS (SELECT 1 FROM "+p.table.Ident+" WHERE "+cond+")", args...).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", p.table.Qualified, err)
	}
	return found, nil
}

// probeWait waits up to d for the probe to see a row after the position, probing at the adaptive
// interval; it reports whether it saw one. It gives up (false) at the first error: the next batch deals
// with what went wrong.
func (p *Processor[T]) probeWait(ctx context.Context, d time.Duration, wake <-chan struct{}) (found, woken bool) {
	end := time.Now().Add(d)
	limit := p.cfg.ProbeInterval
	if time.Since(p.lastRecords) >= probeQuietAfter {
		limit *= 4
	}
	for {
		gap := min(max(p.probeGap, probeFirst), limit, time.Until(end))
		if gap <= 0 {
			return false, false
		}
		t := time.NewTimer(gap)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, false
		case <-wake:
			t.Stop()
			return false, true
		}
		p.probeGap = min(2*max(p.probeGap, probeFirst), limit)
		seen, err := p.probe(ctx)
		if err != nil {
			p.log.Debug().Err(err).Msg("probe failed; waiting for the next batch")
			return false, false
		}
		if seen {
			return true, false
		}
	}
}
