package handlers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inorder-dev/inorder/handlers"
)

// Value kinds a fuzzed row is built from: the natural Go forms Row documents for its values.
const (
	kindString = iota
	kindInt
	kindFloat
	kindRaw
	kindBool
	kindNull
	kindTime
	kindCount
)

// fuzzRow builds a row from the fuzzer's inputs: the columns are cols split at commas (so "a,a" gives a
// duplicate column), and column k holds a value of kind kinds[k%len(kinds)] made from s, i, fl, raw and b.
// Values of the same kind differ per column where they can, so that a reordering would show.
func fuzzRow(cols, s string, i int64, fl float64, raw []byte, b bool, kinds []byte) (handlers.Row, []int) {
	names := strings.Split(cols, ",")
	if len(names) > 64 {
		names = names[:64]
	}
	if len(kinds) == 0 {
		kinds = []byte{kindString}
	}
	row := handlers.Row{Columns: names, Values: make([]any, len(names))}
	kindOf := make([]int, len(names))
	for k := range names {
		kind := int(kinds[k%len(kinds)]) % kindCount
		kindOf[k] = kind
		switch kind {
		case kindString:
			row.Values[k] = s + strings.Repeat("#", k)
		case kindInt:
			row.Values[k] = i + int64(k) // wraps at the ends; any int64 will do
		case kindFloat:
			row.Values[k] = fl
		case kindRaw:
			row.Values[k] = json.RawMessage(bytes.Clone(raw))
		case kindBool:
			row.Values[k] = b != (k%2 == 1)
		case kindNull:
			row.Values[k] = nil
		case kindTime:
			// Whole seconds over the whole int64 range: years outside 0..9999 cannot be JSON (RFC 3339) and
			// must fail the row, not produce a broken document.
			row.Values[k] = time.Unix(i+int64(k), int64(k)*1000).UTC()
		}
	}
	return row, kindOf
}

// FuzzRowMarshalJSON checks Row.MarshalJSON on rows made of fuzzed column names and values (strings of any
// bytes, any int64, any float64 including NaN and ±Inf, raw JSON that may be invalid, booleans, nulls and
// times of any year). The properties:
//
//   - It never panics, and it fails exactly when one of the values has no JSON form (json.Marshal fails on
//     it: a NaN or infinite float, invalid raw JSON, a time outside years 0..9999), naming the first such
//     column in the error.
//   - When it succeeds the output is valid JSON and json.Marshal(row), which re-validates and compacts what
//     a Marshaler returns, gives the same bytes (so sinks may call MarshalJSON directly); and it is valid
//     UTF-8 whenever the raw JSON values are (names and strings are coerced: each invalid byte becomes
//     U+FFFD, as encoding/json does).
//   - The output is one object whose members are, in order, exactly the columns: the i-th member's name is
//     Columns[i] (with invalid bytes as U+FFFD) and its value is Values[i] in its natural JSON form (a string,
//     the integer's digits, a number equal to the float, the raw JSON embedded as JSON and equal to it once
//     decoded, a boolean, null, an RFC 3339 time equal to the time).
//
// Duplicate column names: a Row mirrors a result set, and SQL allows two columns of one name (SELECT a, a).
// MarshalJSON then writes the name twice, in column order. That is still valid JSON (RFC 8259 only says names
// SHOULD be unique), and the property above holds member by member over the token stream; a decoder into a
// map keeps the last one, so the map has exactly the distinct column names, which is checked too.
func FuzzRowMarshalJSON(f *testing.F) {
	type seed struct {
		cols  string
		s     string
		i     int64
		fl    float64
		raw   []byte
		b     bool
		kinds []byte
	}
	all := []byte{kindString, kindInt, kindFloat, kindRaw, kindBool, kindNull, kindTime}
	for _, sd := range []seed{
		{"id,created_at,payload,amount,ok,note,at", "hello", 42, 1.5, []byte(`{"a":[1,2,{"b":null}]}`), true, all},
		{"", "", 0, 0, nil, false, []byte{kindString}},             // one column with an empty name
		{"a,a,a", "x", 1, 2, []byte(`1`), false, []byte{0, 1, 2}},  // duplicate names
		{"nan", "", 0, math.NaN(), nil, false, []byte{kindFloat}},  // must fail
		{"inf", "", 0, math.Inf(1), nil, false, []byte{kindFloat}}, // must fail
		{"ninf,x", "", 0, math.Inf(-1), nil, false, []byte{kindString, kindFloat}},
		{"negzero", "", 0, math.Copysign(0, -1), nil, false, []byte{kindFloat}},
		{"tiny", "", 0, 5e-324, nil, false, []byte{kindFloat}},
		{"raw", "", 0, 0, []byte(`{"a":`), false, []byte{kindRaw}},              // invalid: must fail
		{"raw", "", 0, 0, []byte{}, false, []byte{kindRaw}},                     // empty raw: must fail
		{"raw", "", 0, 0, []byte(" \t{ \"a\" : 1 }\n"), false, []byte{kindRaw}}, // padded: compacted
		{"raw", "", 0, 0, []byte(`"<script>&\u2028"`), false, []byte{kindRaw}},  // escaped HTML, separators
		{"raw", "", 0, 0, []byte(`{"a":1,"a":2}`), false, []byte{kindRaw}},      // duplicate keys inside
		{"raw,raw2", "", 0, 0, []byte(`1 2`), false, []byte{kindRaw}},           // two values: must fail
		{"q\"uote,back\\slash,ctl\x01,nl\n", "\"\\\x00\n</>&", 0, 0, nil, false, []byte{kindString}},
		{"bad\xffname,é", "bad\xff\xfestring", 0, 0, nil, false, []byte{kindString}},
		{"line\u2028sep", "para\u2029sep", 0, 0, nil, false, []byte{kindString}},
		{"min,max", "", math.MinInt64, 0, nil, false, []byte{kindInt}},
		{"max", "", math.MaxInt64, 0, nil, false, []byte{kindInt}},
		{"t", "", 253402300800, 0, nil, false, []byte{kindTime}}, // year 10000: must fail
		{"t", "", -62167219201, 0, nil, false, []byte{kindTime}}, // year -1: must fail
		{"t", "", -62135596800, 0, nil, false, []byte{kindTime}}, // year 1, the zero time
		{"n,b,b2", "", 0, 0, nil, true, []byte{kindNull, kindBool}},
	} {
		f.Add(sd.cols, sd.s, sd.i, sd.fl, sd.raw, sd.b, sd.kinds)
	}
	f.Fuzz(func(t *testing.T, cols, s string, i int64, fl float64, raw []byte, b bool, kinds []byte) {
		row, kindOf := fuzzRow(cols, s, i, fl, raw, b, kinds)
		out, err := row.MarshalJSON()

		firstBad := -1
		for k, v := range row.Values {
			if _, verr := json.Marshal(v); verr != nil {
				firstBad = k
				break
			}
		}
		if firstBad >= 0 {
			if err == nil {
				t.Fatalf("column %q holds %#v, which has no JSON form, yet MarshalJSON gave %q", row.Columns[firstBad],
					row.Values[firstBad], out)
			}
			if want := fmt.Sprintf("column %q: ", row.Columns[firstBad]); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q does not start with %q", err, want)
			}
			if _, merr := json.Marshal(row); merr == nil {
				t.Fatalf("json.Marshal(row) succeeded where MarshalJSON failed")
			}
			return
		}
		if err != nil {
			t.Fatalf("MarshalJSON failed on values that all have a JSON form: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %q", out)
		}
		if ref, rerr := referenceRowJSON(row); rerr != nil || !bytes.Equal(ref, out) {
			t.Fatalf("json.Marshal of each value gives %q (%v), MarshalJSON %q", ref, rerr, out)
		}
		if m, merr := json.Marshal(row); merr != nil {
			t.Fatalf("json.Marshal(row) rejects what MarshalJSON wrote (%q): %v", out, merr)
		} else if !bytes.Equal(m, out) {
			t.Fatalf("json.Marshal(row) gives %q, MarshalJSON %q", m, out)
		}
		usesRaw := false
		for _, k := range kindOf {
			usesRaw = usesRaw || k == kindRaw
		}
		if (!usesRaw || utf8.Valid(raw)) && !utf8.Valid(out) {
			t.Fatalf("output is not UTF-8: %q", out)
		}

		// Member by member, over the token stream: duplicates and order are visible here.
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("output does not start an object: %v %v in %q", tok, err, out)
		}
		members := 0
		for k := 0; dec.More(); k++ {
			members++
			if k >= len(row.Columns) {
				t.Fatalf("more members than the %d columns in %q", len(row.Columns), out)
			}
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("member %d: %v in %q", k, err, out)
			}
			if want := string([]rune(row.Columns[k])); tok != want {
				t.Fatalf("member %d is named %q, want column %q (%q) in %q", k, tok, row.Columns[k], want, out)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("member %d: %v in %q", k, err, out)
			}
			checkValue(t, row.Columns[k], kindOf[k], row.Values[k], v)
		}
		if members != len(row.Columns) {
			t.Fatalf("%d members for %d columns in %q", members, len(row.Columns), out)
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
			t.Fatalf("output does not end its object: %v %v in %q", tok, err, out)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("data after the object in %q: %v", out, err)
		}
		// As a map: exactly the distinct column names.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("output does not decode to an object: %v", err)
		}
		distinct := map[string]bool{}
		for _, c := range row.Columns {
			distinct[string([]rune(c))] = true
		}
		if len(m) != len(distinct) {
			t.Fatalf("decoded object has %d names, the columns %d distinct ones", len(m), len(distinct))
		}
		for c := range distinct {
			if _, ok := m[c]; !ok {
				t.Fatalf("column %q missing from %q", c, out)
			}
		}
	})
}

// checkValue checks that got, a member's value as written, is v's natural JSON form.
func checkValue(t *testing.T, col string, kind int, v any, got json.RawMessage) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("column %q (%#v): %s; written %s", col, v, fmt.Sprintf(format, args...), got)
	}
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var x any
		if err := d.Decode(&x); err != nil {
			fail("does not decode: %v", err)
		}
		return x
	}
	switch kind {
	case kindString:
		var s string
		if err := json.Unmarshal(got, &s); err != nil || s != string([]rune(v.(string))) {
			fail("want the string %q, got %q (%v)", string([]rune(v.(string))), s, err)
		}
	case kindInt:
		if want := strconv.FormatInt(v.(int64), 10); string(got) != want {
			fail("want the integer %s", want)
		}
	case kindFloat:
		n, ok := decode(got).(json.Number)
		if !ok {
			fail("not a number")
		}
		x, err := strconv.ParseFloat(string(n), 64)
		if err != nil || x != v.(float64) || math.Signbit(x) != math.Signbit(v.(float64)) {
			fail("want the number %v, got %v (%v)", v, x, err)
		}
	case kindRaw:
		if !reflect.DeepEqual(decode(got), decode(v.(json.RawMessage))) {
			fail("raw JSON not embedded as the same JSON value")
		}
	case kindBool:
		if want := strconv.FormatBool(v.(bool)); string(got) != want {
			fail("want %s", want)
		}
	case kindNull:
		if string(got) != "null" {
			fail("want null")
		}
	case kindTime:
		var tm time.Time
		if err := json.Unmarshal(got, &tm); err != nil || !tm.Equal(v.(time.Time)) {
			fail("want the time %v, got %v (%v)", v, tm, err)
		}
	}
}

// referenceRowJSON is what MarshalJSON wrote before it encoded the common types itself: json.Marshal of
// each name and value. The stdout handler's lines (and every sink's body) must stay byte for byte the same.
func referenceRowJSON(r handlers.Row) ([]byte, error) {
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
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
