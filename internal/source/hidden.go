package source

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/inordertype"
)

// Hidden is what the hidden columns in front of a read's row say of it (see Layout).
type Hidden struct {
	// Position is the row's place in the order, its time in UTC.
	Position inordertype.Position
	// Key is the row's key, "" when the source has no key column or the row's is NULL.
	Key string
	// CreatedAt is the application's created_at, in UTC: the position's time, unless the insert clock
	// orders the table, where it is the column's own value (zero when NULL).
	CreatedAt time.Time
	// Traced says that the row carries a trace context: its traceparent (not NULL) and its tracestate.
	Traced                  bool
	TraceParent, TraceState string
	// Size is the row's size as a read bounded by bytes counts it (SizeExpr), and More says that a row
	// follows it below the horizon; both zero in a plain read.
	Size int64
	More bool
}

// HiddenScanner decodes the hidden columns of the rows of one read. Their types are known (the position's
// time, the id, the key and the trace context as text, the size an integer): only the times go through
// pgx's codecs, with plans made at the first row, and nothing is allocated but the strings of the id and
// the key.
type HiddenScanner struct {
	Layout
	m           *pgtype.Map
	at, stamped timeColumn
}

// timeColumn decodes a column of times: a timestamptz straight into a pgtype.Timestamptz, any other type
// (a timestamp created_at) as pgx scans it into a time.Time. The values are kept here, not allocated per
// row: a plan's destination escapes.
type timeColumn struct {
	plan, tzPlan pgtype.ScanPlan
	t            time.Time
	tz           pgtype.Timestamptz
}

// decode decodes one value of the column described by fd.
func (c *timeColumn) decode(m *pgtype.Map, fd pgconn.FieldDescription, raw []byte) (time.Time, error) {
	if fd.DataTypeOID == pgtype.TimestamptzOID {
		if c.tzPlan == nil {
			c.tzPlan = m.PlanScan(fd.DataTypeOID, fd.Format, &c.tz)
		}
		if err := c.tzPlan.Scan(raw, &c.tz); err == nil && c.tz.Valid && c.tz.InfinityModifier == pgtype.Finite {
			return c.tz.Time, nil
		}
		// NULL, an infinity or an error: pgx's own error for a time.Time, below.
	}
	if c.plan == nil {
		c.plan = m.PlanScan(fd.DataTypeOID, fd.Format, &c.t)
	}
	if err := c.plan.Scan(raw, &c.t); err != nil {
		return time.Time{}, fmt.Errorf("column %s: %w", fd.Name, err)
	}
	return c.t, nil
}

// HiddenScanner returns a decoder of the hidden columns of a read, sized or not, with m's codecs.
func (t *Table) HiddenScanner(sized bool, m *pgtype.Map) *HiddenScanner {
	return &HiddenScanner{Layout: t.Layout(sized), m: m}
}

// Scan decodes the hidden columns of one row, its columns described by fds and received as raw, into h.
// Its error names the column.
func (s *HiddenScanner) Scan(fds []pgconn.FieldDescription, raw [][]byte, h *Hidden) error {
	if len(raw) < s.Hidden {
		return fmt.Errorf("%d columns, want at least the %d hidden ones", len(raw), s.Hidden)
	}
	at, err := s.at.decode(s.m, fds[0], raw[0])
	if err != nil {
		return err
	}
	if raw[1] == nil {
		return fmt.Errorf("column %s: the id is NULL", fds[1].Name)
	}
	*h = Hidden{Position: inordertype.Position{CreatedAt: at.UTC(), ID: string(raw[1])}} // text, either format
	h.CreatedAt = h.Position.CreatedAt
	if raw[2] != nil {
		h.Key = string(raw[2])
	}
	if i := s.CreatedAt; i >= 0 {
		h.CreatedAt = time.Time{}
		if raw[i] != nil {
			stamped, err := s.stamped.decode(s.m, fds[i], raw[i])
			if err != nil {
				return err
			}
			h.CreatedAt = stamped.UTC()
		}
	}
	if i := s.Trace; i >= 0 && raw[i] != nil {
		h.Traced, h.TraceParent, h.TraceState = true, string(raw[i]), string(raw[i+1])
	}
	if i := s.Size; i >= 0 {
		n, err := sizeOf(fds[i], raw[i])
		if err != nil {
			return fmt.Errorf("column %s: %w", fds[i].Name, err)
		}
		h.Size, h.More = n, boolOf(raw[i+1])
	}
	return nil
}

// boolOf decodes a boolean column, sent as text ("t") or binary (1).
func boolOf(raw []byte) bool { return len(raw) == 1 && (raw[0] == 't' || raw[0] == 1) }

// sizeOf decodes the size column (an integer), sent as text or binary depending on the protocol.
func sizeOf(fd pgconn.FieldDescription, raw []byte) (int64, error) {
	if fd.Format == pgtype.BinaryFormatCode {
		switch len(raw) {
		case 4:
			return int64(int32(binary.BigEndian.Uint32(raw))), nil
		case 8:
			return int64(binary.BigEndian.Uint64(raw)), nil
		}
		return 0, fmt.Errorf("%d bytes for an integer", len(raw))
	}
	return strconv.ParseInt(string(raw), 10, 64)
}
