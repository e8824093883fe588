package handlers

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the row's JSON encoding, as MarshalJSON gives it, to b. The types a generic read
// gives most (text, integers, booleans, timestamps, json and jsonb) are written without reflection, byte
// for byte as encoding/json writes them (HTML characters escaped, invalid UTF-8 as U+FFFD); the others go
// through json.Marshal. A sink that writes many rows (the stdout handler) appends them to one buffer.
func (r Row) AppendJSON(b []byte) ([]byte, error) {
	if len(r.Values) != len(r.Columns) {
		return b, fmt.Errorf("row has %d columns and %d values", len(r.Columns), len(r.Values))
	}
	b = append(b, '{')
	for i, c := range r.Columns {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, c)
		b = append(b, ':')
		var err error
		if b, err = appendJSONValue(b, r.Values[i]); err != nil {
			return b, fmt.Errorf("column %q: %w", c, err)
		}
	}
	return append(b, '}'), nil
}

// appendJSONValue appends v as json.Marshal encodes it.
func appendJSONValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case time.Time:
		// The bytes of MarshalJSON, written straight onto b rather than into a buffer of their own.
		if out, err := x.AppendText(append(b, '"')); err == nil {
			return append(out, '"'), nil
		}
		// A year outside 0..9999: json.Marshal words the error.
	case json.RawMessage:
		if x == nil {
			return append(b, "null"...), nil
		}
		// Compacted, escaped and validated in one pass straight onto b: a document of megabytes is read
		// once and copied once.
		if out, ok := appendCompactRaw(b, x); ok {
			return out, nil
		}
		// Invalid (or nested deeper than encoding/json allows): json.Marshal words the error.
	}
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, as encoding/json writes it: '"' and '\' escaped, control
// characters as \b, \f, \n, \r, \t or \u00XX, '<', '>' and '&' as \u003c, \u003e and \u0026, U+2028 and
// U+2029 escaped, and each byte of invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
