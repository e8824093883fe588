package inordertype

import (
	"encoding/json"
	"fmt"
	"time"
)

// Position is where a process stands in its source: the (created_at, id) pair of the last record it
// handled. The pair identifies one row totally, so ties on created_at are neither lost nor reordered. It
// has three forms: the beginning (the zero Position, before every row), a time alone (an empty ID: after
// every row created at or before CreatedAt) and a record (after exactly that row).
type Position struct {
	// CreatedAt is the created_at of the last record handled, in UTC. The zero value means the
	// beginning: every row is ahead of the position (IsBeginning), and ID is then ignored.
	CreatedAt time.Time
	// ID is the id of the last record handled, as text whatever the id column's type, so that one type
	// serves every source. An empty ID with a non-zero CreatedAt means "after every row created at or
	// before CreatedAt": the position a process registered with StartFromNow or StartFromTime starts at,
	// and the one a rewind to a time gives.
	ID string
}

// IsBeginning reports whether p is before every row: its CreatedAt is zero.
func (p Position) IsBeginning() bool { return p.CreatedAt.IsZero() }

// String formats the position for logs and status: "beginning", "after <time>" for a time alone, or
// "<time>/<id>", the time in RFC 3339 with nanoseconds, in UTC.
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

// positionJSON is the JSON form of a Position: null parts rather than empty ones, so that a reader of the
// audit table or of `inorder audit --json` tells the three forms apart without knowing Go's zero time.
type positionJSON struct {
	CreatedAt *time.Time `json:"created_at"`
	ID        *string    `json:"id"`
}

// MarshalJSON encodes a position as {"created_at": ..., "id": ...}: both null for the beginning, a null
// id for a time alone. The time is written in UTC; a year outside 0..9999 is an error, as for time.Time.
func (p Position) MarshalJSON() ([]byte, error) {
	var v positionJSON
	if !p.IsBeginning() {
		at := p.CreatedAt.UTC()
		v.CreatedAt = &at
		if p.ID != "" {
			v.ID = &p.ID
		}
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes what MarshalJSON writes. Whatever p held before is replaced; a missing or null
// part stays zero, and the time is kept in UTC.
func (p *Position) UnmarshalJSON(b []byte) error {
	var v positionJSON
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
