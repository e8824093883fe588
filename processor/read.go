package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/inorder-dev/inorder/internal/setting"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
)

// item is one record read from the source, with its position.
type item[T any] struct {
	rec handlers.Record[T]
	pos inordertype.Position
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
// (created_at, id) order, within the byte budget, each scanned with its position.
func (rd *reader[T]) read(work context.Context, pos inordertype.Position, horizon time.Time) ([]item[T], error) {
	b := rd.nextBounds()
	r, err := rd.readRows(work, pos, horizon, b)
	if err != nil {
		return nil, err
	}
	rd.learn(b, r)
	return r.items, nil
}

// nextBounds is the bounds of the next read: the batch bound of records and the byte budget.
func (rd *reader[T]) nextBounds() bounds {
	// A keyed window's reads are kept to sixteen windows at least (minLimit): the window stays full until
	// near the end of the batch, and drains there, the records in flight finishing before the next read,
	// which costs one handler latency per batch (four windows a batch left a webhook stream at 0.81 of
	// plain clients, sixteen at 0.91).
	return rd.budget.bounds(max(rd.batchLimit(), rd.minLimit))
}

// learn takes what a read under b found: the adaptive bound and the size ratio move after it.
func (rd *reader[T]) learn(b bounds, r readResult[T]) {
	rd.budget.learn(r.received, r.sized, r.largest)
	rd.lastFull = r.full
	rd.adapt(len(r.items), b.limit, r.full)
}

// readRows reads at most b.limit records after pos and below horizon, within b's budget. It changes
// nothing in p: a read ahead runs it beside the delivery.
func (rd *reader[T]) readRows(work context.Context, pos inordertype.Position, horizon time.Time, b bounds) (readResult[T], error) {
	ctx, cancel := rd.cur.Session.Bounded(work)
	defer cancel()
	sql, args := rd.table.ReadSQL(rd.generic, pos, horizon, b.limit, b.sized)
	rows, err := rd.cur.Lock.Tx().Query(ctx, sql, args...)
	if err != nil {
		return readResult[T]{}, fmt.Errorf("read %s: %w", rd.table.Qualified, err)
	}
	r, err := rd.scanItems(rows, min(b.limit, 1024), b.bytes, b.sized > 0)
	if err != nil {
		return readResult[T]{}, err
	}
	// A plain read (b.sized zero) cannot say whether a row follows: a read that came back full of records
	// says a backlog may lie behind it.
	r.full = r.full || r.more || (b.sized <= 0 && len(r.items) == b.limit)
	return r, nil
}

// batchLimit is the bound of the next read: Config.BatchSize, or the adaptive bound when it is zero.
func (rd *reader[T]) batchLimit() int {
	if rd.batchSize > 0 {
		return rd.batchSize
	}
	if rd.limit == 0 {
		rd.limit = setting.DefaultBatchSize
	}
	return rd.limit
}

// adapt moves the adaptive bound after a read of got records under limit: doubled when the read came
// back full of records (a backlog lies behind it), kept near what came back when the byte budget cut it (a
// backlog of big records: the rows the limit reads past the budget are looked at for nothing), back to
// 100 when it came back short (the stream keeps up).
func (rd *reader[T]) adapt(got, limit int, full bool) {
	if rd.batchSize > 0 {
		return
	}
	rd.limit = nextLimit(rd.limit, got, limit, full)
}

// nextLimit is the adaptive bound after a read that brought got records under limit, full when a backlog
// lies behind them, the bound having been cur.
func nextLimit(cur, got, limit int, full bool) int {
	switch {
	case !full:
		return setting.DefaultBatchSize
	case got >= limit:
		return min(max(cur, setting.DefaultBatchSize)*2, setting.DefaultMaxBatchSize)
	}
	// Cut by the byte budget: twice what came back leaves room for records that grow smaller.
	return min(max(2*got, 1), setting.DefaultMaxBatchSize)
}

// scanItems scans the rows of a read (counted when it carries each row's size, see Table.Layout), each
// with its position, and keeps them until they reach keep bytes as received: the read's bound by size
// (see budget.go) counts stored sizes, which a compressed value's received size can pass before its ratio
// is known. The rows past that are received and dropped (the protocol has no way to stop a result part way
// but to end the transaction) and read again next time.
func (rd *reader[T]) scanItems(rows pgx.Rows, capacity int, keep int64, counted bool) (readResult[T], error) {
	defer rows.Close()
	var r readResult[T]
	r.items = make([]item[T], 0, capacity)
	hidden := rd.table.HiddenScanner(counted, rows.Conn().TypeMap())
	hr := &hiddenRow{Rows: rows, n: hidden.Hidden}
	var h source.Hidden
	for rows.Next() {
		raw := rows.RawValues()
		received := rowBytes(raw)
		if len(r.items) > 0 && r.received+received > keep {
			r.full = true
			break
		}
		if err := hidden.Scan(rows.FieldDescriptions(), raw, &h); err != nil {
			return readResult[T]{}, fmt.Errorf("read %s: %w", rd.table.Qualified, err)
		}
		r.sized += h.Size
		r.more = h.More
		r.received, r.largest = r.received+received, max(r.largest, received)
		r.items = append(r.items, item[T]{pos: h.Position, rec: handlers.Record[T]{
			Process: rd.process, ID: h.Position.ID, Key: h.Key, CreatedAt: h.CreatedAt}})
		last := &r.items[len(r.items)-1]
		if h.Traced {
			last.tr = &itemTrace{traceContext: traceContext{parent: h.TraceParent, state: h.TraceState}}
		}
		var err error
		if rd.positional != nil {
			err = rd.positional.scanInto(hr, &last.rec.Value) // straight into the batch, no copy
		} else {
			last.rec.Value, err = rd.scan(hr)
		}
		if err != nil {
			return readResult[T]{}, fatalError{fmt.Errorf("scan record %s of %s: %w", h.Position.ID, rd.table.Qualified, err)}
		}
	}
	rows.Close() // receives what the budget left, so that its error is this read's
	if err := rows.Err(); err != nil {
		return readResult[T]{}, fmt.Errorf("read %s: %w", rd.table.Qualified, err)
	}
	return r, nil
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

// rowScanner returns the scan function for handlers.Row: column names from the row, values as pgx
// decodes them, and the json and jsonb columns (selected as text, at the indexes in raw) as raw JSON.
func rowScanner(raw []int) func(pgx.CollectableRow) (handlers.Row, error) {
	cols := valueDecoders{raw: raw}
	return func(row pgx.CollectableRow) (handlers.Row, error) {
		fds := row.FieldDescriptions()
		var vals []any
		var err error
		if c, ok := row.(interface{ Conn() *pgx.Conn }); ok && c.Conn() != nil {
			vals, err = cols.decode(c.Conn().TypeMap(), fds, row.RawValues())
		} else {
			vals, err = row.Values()
		}
		if err != nil {
			return handlers.Row{}, err
		}
		r := handlers.Row{Columns: cols.names(fds), Values: vals}
		for _, i := range raw {
			if s, ok := vals[i].(string); ok { // decoded by Rows.Values, not by cols
				vals[i] = json.RawMessage(s)
			}
		}
		return r, nil
	}
}

// valueDecoders decode a generic row's values as pgx's Rows.Values does (the same codecs, the same Go
// types), with each column's decoding planned once rather than once per value: a backlog of generic rows
// spends its time on its records, not on looking up codecs.
type valueDecoders struct {
	raw   []int // the indexes of the json and jsonb columns, selected as text and decoded as raw JSON
	oids  []uint32
	funcs []func(raw []byte) (any, error)
	cols  []string // the column names, shared by the rows (handlers.Row.Columns is read-only)
	slab  []any    // what is left of the values of the rows to come (see decode)
}

// slabRows is how many rows' values one allocation holds, and slabRowBytes the largest row (as received)
// whose values go in one: a record a handler keeps keeps the values of the others in its slab, at most
// slabRows times slabRowBytes of them.
const (
	slabRows     = 128
	slabRowBytes = 4 << 10
)

// names returns the column names of fds, the same slice for every row with the same names.
func (d *valueDecoders) names(fds []pgconn.FieldDescription) []string {
	same := len(d.cols) == len(fds)
	for i := 0; same && i < len(fds); i++ {
		same = d.cols[i] == fds[i].Name
	}
	if !same {
		d.cols = make([]string, len(fds))
		for i, fd := range fds {
			d.cols[i] = fd.Name
		}
	}
	return d.cols
}

// decode decodes one row's raw values, planning the columns anew when they are not those of the last row.
func (d *valueDecoders) decode(m *pgtype.Map, fds []pgconn.FieldDescription, raw [][]byte) ([]any, error) {
	if len(d.oids) != len(fds) {
		d.oids, d.funcs = make([]uint32, len(fds)), make([]func([]byte) (any, error), len(fds))
	}
	var vals []any
	if rowBytes(raw) > slabRowBytes {
		vals = make([]any, len(fds))
	} else {
		// A small row's values are cut from a slab shared with the rows after it: one allocation for
		// many rows, each row's slice capped at its own values, so that appending to one never reaches
		// the next.
		if len(d.slab) < len(fds) {
			d.slab = make([]any, len(fds)*slabRows)
		}
		vals, d.slab = d.slab[:len(fds):len(fds)], d.slab[len(fds):]
	}
	for i, fd := range fds {
		if d.funcs[i] == nil || d.oids[i] != fd.DataTypeOID {
			d.oids[i], d.funcs[i] = fd.DataTypeOID, valueDecoder(m, fd)
			if slices.Contains(d.raw, i) && fd.DataTypeOID == pgtype.TextOID {
				// Straight from the received bytes: a document of megabytes is copied once, not
				// decoded to a string and copied again.
				d.funcs[i] = rawJSON
			}
		}
		if raw[i] == nil {
			continue // NULL
		}
		v, err := d.funcs[i](raw[i])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", fd.Name, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// valueDecoder plans the decoding of one column into what its codec's DecodeValue gives: a typed scan
// plan for the types a generic read selects most, DecodeValue itself for the others.
func valueDecoder(m *pgtype.Map, fd pgconn.FieldDescription) func([]byte) (any, error) {
	oid, format := fd.DataTypeOID, fd.Format
	switch oid {
	case pgtype.Int8OID:
		return typedDecoder[int64](m, oid, format)
	case pgtype.Int4OID:
		return typedDecoder[int32](m, oid, format)
	case pgtype.Int2OID:
		return typedDecoder[int16](m, oid, format)
	case pgtype.Float8OID:
		return typedDecoder[float64](m, oid, format)
	case pgtype.BoolOID:
		return typedDecoder[bool](m, oid, format)
	case pgtype.TextOID, pgtype.VarcharOID:
		return typedDecoder[string](m, oid, format)
	case pgtype.TimestamptzOID:
		t := new(pgtype.Timestamptz) // reused: the value goes out as the time it holds
		plan := m.PlanScan(oid, format, t)
		return func(raw []byte) (any, error) {
			if err := plan.Scan(raw, t); err != nil {
				return nil, err
			}
			if t.InfinityModifier != pgtype.Finite {
				return t.InfinityModifier, nil
			}
			return t.Time, nil
		}
	}
	typ, ok := m.TypeForOID(oid)
	return func(raw []byte) (any, error) {
		if !ok {
			// What Rows.Values gives for a type pgx does not know: text as a string, else the bytes.
			if format == pgtype.TextFormatCode {
				return string(raw), nil
			}
			return append([]byte(nil), raw...), nil
		}
		return typ.Codec.DecodeValue(m, oid, format, raw)
	}
}

// rawJSON decodes a json or jsonb column selected as text into raw JSON, a copy of the received bytes.
func rawJSON(raw []byte) (any, error) { return json.RawMessage(bytes.Clone(raw)), nil }

// typedDecoder decodes into a V with a plan made once, through one V reused from value to value (a V
// of its own per value would be allocated besides the value's box).
func typedDecoder[V any](m *pgtype.Map, oid uint32, format int16) func([]byte) (any, error) {
	v := new(V)
	plan := m.PlanScan(oid, format, v)
	return func(raw []byte) (any, error) {
		if err := plan.Scan(raw, v); err != nil {
			return nil, err
		}
		return *v, nil
	}
}
