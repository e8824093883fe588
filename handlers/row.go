package handlers

import (
	"encoding/json"
	"fmt"
	"time"
)

// Row is the generic record the CLI works with: a source row's columns in table order and their values.
// Values are the natural Go forms of the column types (int64, float64, string, bool, time.Time, nil),
// with json and jsonb columns as json.RawMessage and other types (uuid, numeric, ...) as their text form.
// The rows of one read share their Columns slice: a handler must not change it.
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
	b, err := r.AppendJSON(make([]byte, 0, 64*len(r.Columns)))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Text returns the value of the first of columns the row has, as text: strings and bytea as they are, json
// and jsonb strings unquoted (other JSON as it is), timestamps in UTC as time.RFC3339Nano and other values
// as fmt prints them. It reports false when the row has none of the columns or the value is NULL. Sinks
// use it for a record's event type or topic: Text("type", "event_type") is the type column, or the
// event_type column when the row has no type column.
func (r Row) Text(columns ...string) (string, bool) {
	for _, c := range columns {
		v, ok := r.Get(c)
		if !ok {
			continue
		}
		switch x := v.(type) {
		case nil:
			return "", false
		case string:
			return x, true
		case []byte:
			return string(x), true
		case json.RawMessage:
			var s string
			if json.Unmarshal(x, &s) == nil {
				return s, true
			}
			return string(x), true
		case time.Time:
			return x.UTC().Format(time.RFC3339Nano), true
		default:
			return fmt.Sprint(x), true
		}
	}
	return "", false
}

// Payload returns the body of the message a sink sends for the row: the value of column when the row has
// that column, otherwise the whole row as JSON (MarshalJSON). An empty column means the whole row. The
// column's value is sent as json and jsonb values and strings as their bytes, bytea as is, NULL as nil
// and other values as their JSON encoding.
func (r Row) Payload(column string) ([]byte, error) {
	if column != "" {
		if v, ok := r.Get(column); ok {
			switch x := v.(type) {
			case nil:
				return nil, nil
			case json.RawMessage:
				return x, nil
			case []byte:
				return x, nil
			case string:
				return []byte(x), nil
			default:
				b, err := json.Marshal(x)
				if err != nil {
					return nil, fmt.Errorf("column %q: %w", column, err)
				}
				return b, nil
			}
		}
	}
	return r.MarshalJSON()
}
