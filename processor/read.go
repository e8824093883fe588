package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/source"
)

// item is one record read from the source, with its position.
type item[T any] struct {
	rec handlers.Record[T]
	pos source.Position
	// tr is what tracing keeps of the record, nil when the row carries no trace context and nothing is
	// recorded: a pointer, so that an untraced batch of a thousand items stays as small as it was.
	tr *itemTrace
}

// itemTrace is the application's trace context written with the row (traceparent, tracestate), and the
// span of the delivery attempt under way, ended when its outcome is known.
type itemTrace struct {
	traceContext
	span trace.Span
}

// read fetches the next batch: at most the batch bound of records after pos and below the horizon, in
// (created_at, id) order, each scanned with its position.
func (p *Processor[T]) read(work context.Context, pos source.Position, horizon time.Time) ([]item[T], error) {
	limit := p.batchLimit()
	if p.windowed() {
		// Keep the window full until near the end of the batch: it drains there, the records in flight
		// finishing before the next read, which costs one handler latency per batch (four windows a batch
		// left a webhook stream at 0.81 of plain clients, sixteen at 0.91).
		limit = max(limit, 16*p.cfg.MaxInFlight)
	}
	ctx, cancel := p.bounded(work)
	defer cancel()
	sql, args := p.table.ReadSQL(p.generic, pos, horizon, limit)
	rows, err := p.cur.Tx().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.table.Qualified, err)
	}
	items, err := p.scanItems(rows, min(limit, 1024))
	if err == nil {
		p.adapt(len(items), limit)
	}
	return items, err
}

// batchLimit is the bound of the next read: Config.BatchSize, or the adaptive bound when it is zero.
func (p *Processor[T]) batchLimit() int {
	if p.cfg.BatchSize > 0 {
		return p.cfg.BatchSize
	}
	if p.limit == 0 {
		p.limit = DefaultBatchSize
	}
	return p.limit
}

// adapt moves the adaptive bound after a read of got records under limit: doubled when the read came
// back full (a backlog lies behind it), back to DefaultBatchSize when it came back short (the stream keeps
// up).
func (p *Processor[T]) adapt(got, limit int) {
	if p.cfg.BatchSize > 0 {
		return
	}
	p.limit = nextLimit(p.limit, got, limit)
}

// nextLimit is the adaptive bound after a read that brought got records under limit, the bound having
// been cur.
func nextLimit(cur, got, limit int) int {
	if got < limit {
		return DefaultBatchSize
	}
	return min(max(cur, DefaultBatchSize)*2, DefaultMaxBatchSize)
}

// scanItems scans the rows of a read, each with its position.
func (p *Processor[T]) scanItems(rows pgx.Rows, capacity int) ([]item[T], error) {
	defer rows.Close()
	items := make([]item[T], 0, capacity)
	var err error
	hr := &hiddenRow{Rows: rows, n: p.table.Hidden()}
	var posScan positionScanner
	for rows.Next() {
		it := item[T]{rec: handlers.Record[T]{Process: p.cfg.Process}}
		var key *string
		if err := posScan.scan(rows, &it.rec.CreatedAt, &it.rec.ID, &key); err != nil {
			return nil, fmt.Errorf("read %s: position columns: %w", p.table.Qualified, err)
		}
		if key != nil {
			it.rec.Key = *key
		}
		if hr.n > 3 {
			if raw := rows.RawValues(); raw[3] != nil { // text either way: no decoding plan needed
				it.tr = &itemTrace{traceContext: traceContext{parent: string(raw[3]), state: string(raw[4])}}
			}
		}
		it.rec.CreatedAt = it.rec.CreatedAt.UTC()
		it.pos = source.Position{CreatedAt: it.rec.CreatedAt, ID: it.rec.ID}
		items = append(items, it)
		last := &items[len(items)-1]
		if p.positional != nil {
			err = p.positional.scanInto(hr, &last.rec.Value) // straight into the batch, no copy
		} else {
			last.rec.Value, err = p.scan(hr)
		}
		if err != nil {
			return nil, fatalError{fmt.Errorf("scan record %s of %s: %w", it.rec.ID, p.table.Qualified, err)}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", p.table.Qualified, err)
	}
	return items, nil
}

// hiddenRow shows a scan function the selected columns only, not the hidden columns in front.
type hiddenRow struct {
	pgx.Rows
	n    int   // the hidden columns (Table.Hidden)
	args []any // reused across rows: the hidden columns' placeholders, then the caller's destinations
}

func (r *hiddenRow) FieldDescriptions() []pgconn.FieldDescription {
	return r.Rows.FieldDescriptions()[r.n:]
}

func (r *hiddenRow) Scan(dest ...any) error {
	r.args = r.args[:0]
	for range r.n {
		r.args = append(r.args, nil) // nil skips a column without decoding it
	}
	r.args = append(r.args, dest...)
	return r.Rows.Scan(r.args...)
}

func (r *hiddenRow) Values() ([]any, error) {
	v, err := r.Rows.Values()
	if err != nil {
		return nil, err
	}
	return v[r.n:], nil
}

func (r *hiddenRow) RawValues() [][]byte { return r.Rows.RawValues()[r.n:] }

// positionScanner decodes the position and key columns in front of each row, leaving the rest to the scan
// function. It plans each column's decoding once per read, not once per row.
type positionScanner struct {
	plans [3]pgtype.ScanPlan
}

func (s *positionScanner) scan(rows pgx.Rows, dest ...any) error {
	fds := rows.FieldDescriptions()
	raw := rows.RawValues()
	for i, d := range dest {
		if s.plans[i] == nil {
			s.plans[i] = rows.Conn().TypeMap().PlanScan(fds[i].DataTypeOID, fds[i].Format, d)
		}
		if err := s.plans[i].Scan(raw[i], d); err != nil {
			return fmt.Errorf("column %s: %w", fds[i].Name, err)
		}
	}
	return nil
}

// rowScanner returns the scan function for handlers.Row: column names from the row, values as pgx
// decodes them, and the json and jsonb columns (selected as text, at the indexes in raw) as raw JSON.
func rowScanner(raw []int) func(pgx.CollectableRow) (handlers.Row, error) {
	return func(row pgx.CollectableRow) (handlers.Row, error) {
		fds := row.FieldDescriptions()
		vals, err := row.Values()
		if err != nil {
			return handlers.Row{}, err
		}
		r := handlers.Row{Columns: make([]string, len(fds)), Values: vals}
		for i, fd := range fds {
			r.Columns[i] = fd.Name
		}
		for _, i := range raw {
			if s, ok := vals[i].(string); ok {
				vals[i] = json.RawMessage(s)
			}
		}
		return r, nil
	}
}
