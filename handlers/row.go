package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Row is the generic record the CLI works with: a source row's columns in table order and their values.
// Values are the natural Go forms of the column types (int64, float64, string, bool, time.Time, nil),
// with json and jsonb columns as json.RawMessage and other types (uuid, numeric, ...) as their text form.
type Row struct {
	Columns []string
	Values  []any
}

// Get returns the value of column name.
func (r Row) Get(name string) (any, bool) {
	for i, c := range r.Columns {
		if c == name {
			return r.Values[i], true
		}
	}
	return nil, false
}

// MarshalJSON encodes the row as one JSON object with its columns in table order: ids, numbers, booleans
// and timestamps as their natural JSON values and json columns embedded as JSON, not as strings.
func (r Row) MarshalJSON() ([]byte, error) {
	if len(r.Values) != len(r.Columns) {
		return nil, fmt.Errorf("row has %d columns and %d values", len(r.Columns), len(r.Values))
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range r.Columns {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(c)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(r.Values[i])
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
