package source

import (
	"encoding/json"
	"fmt"
	"time"
)

// Position is where a process stands in its source: the (created_at, id) pair of the last record it
// handled. The pair identifies one row totally, so ties on created_at are neither lost nor reordered.
// cursor.Position is this type.
type Position struct {
	// CreatedAt is the created_at of the last record handled. The zero value means the beginning: every
	// row is ahead of the position.
	CreatedAt time.Time
	// ID is the id of the last record handled, as text. An empty ID with a non-zero CreatedAt means "after
	// every row created at or before CreatedAt", the position a process registered with StartFromNow
	// starts at.
	ID string
}

// IsBeginning reports whether p is before every row.
func (p Position) IsBeginning() bool { return p.CreatedAt.IsZero() }

// String formats the position for logs and status.
func (p Position) String() string {
	switch {
	case p.IsBeginning():
		return "beginning"
	case p.ID == "":
		return "after " + p.CreatedAt.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprintf("%s/%s", p.CreatedAt.UTC().Format(time.RFC3339Nano), p.ID)
	}
}

// Args are the values a cursor row stores for p: NULLs for the beginning, a NULL id for a time alone.
func (p Position) Args() [2]any {
	if p.IsBeginning() {
		return [2]any{nil, nil}
	}
	var id any
	if p.ID != "" {
		id = p.ID
	}
	return [2]any{p.CreatedAt, id}
}

// After is the keyset condition "the row comes after p" on the table's columns, its parameters numbered
// from n, and their values. It is the one place where the three forms of a position become SQL.
func (t *Table) After(p Position, prefix string, n int) (cond string, args []any) {
	ca := prefix + quote(t.Spec.CreatedAtColumn)
	id := prefix + quote(t.Spec.IDColumn)
	switch {
	case p.IsBeginning():
		return "true", nil
	case p.ID == "":
		return fmt.Sprintf("%s > $%d", ca, n), []any{p.CreatedAt}
	default:
		return fmt.Sprintf("(%s, %s) > ($%d, $%d::text::%s)", ca, id, n, n+1, t.IDCast), []any{p.CreatedAt, p.ID}
	}
}

// MarshalJSON encodes a position as {"created_at": ..., "id": ...}, null parts for the beginning.
func (p Position) MarshalJSON() ([]byte, error) {
	var v struct {
		CreatedAt *time.Time `json:"created_at"`
		ID        *string    `json:"id"`
	}
	if !p.IsBeginning() {
		at := p.CreatedAt.UTC()
		v.CreatedAt = &at
		if p.ID != "" {
			v.ID = &p.ID
		}
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (p *Position) UnmarshalJSON(b []byte) error {
	var v struct {
		CreatedAt *time.Time `json:"created_at"`
		ID        *string    `json:"id"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Position{}
	if v.CreatedAt != nil {
		p.CreatedAt = v.CreatedAt.UTC()
	}
	if v.ID != nil {
		p.ID = *v.ID
	}
	return nil
}
