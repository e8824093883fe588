package cursor_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// FuzzPositionJSON checks the JSON form of a Position, which the audit table stores and `inorder audit
// --json` prints:
//
//   - Round trip: MarshalJSON then UnmarshalJSON gives back the same Position for any created_at in UTC
//     truncated to microseconds (Postgres's precision) within the years JSON's RFC 3339 can write (1 to
//     9999; year 1 January 1st 00:00 UTC is the zero time, the beginning) and any ID of valid UTF-8 (Postgres
//     text always is; other bytes come back as U+FFFD each, as encoding/json writes them). The beginning
//     encodes as {"created_at":null,"id":null} and decodes as the zero Position, whatever ID it held.
//   - Any time outside years 0..9999 fails MarshalJSON with an error, never a panic or a broken document.
//   - UnmarshalJSON never panics on arbitrary bytes, and when it accepts them, the Position it yields is
//     stable: its encoding decodes to the same Position (when it can be encoded: an accepted time whose
//     offset moves it past year 9999 or before year 0 in UTC cannot be, which MarshalJSON reports as an
//     error), and a decoded beginning has no ID once re-encoded.
func FuzzPositionJSON(f *testing.F) {
	f.Add(int64(1714557600), int64(123456789), "42", []byte(`{"created_at":"2024-05-01T10:00:00.123456Z","id":"42"}`))
	f.Add(int64(0), int64(0), "", []byte(`{"created_at":null,"id":null}`))
	f.Add(int64(-62135596800), int64(0), "ignored", []byte(`{"created_at":"0001-01-01T00:00:00Z","id":"x"}`))
	f.Add(int64(253402300799), int64(999999999), "\u2028<&>", []byte(`{"created_at":"9999-12-31T23:00:00-02:00"}`))
	f.Add(int64(-62167219200), int64(1000), "a\"b\\c\x00", []byte(`{"created_at":"0000-01-01T00:30:00+01:00","id":""}`))
	f.Add(int64(1), int64(1), "\xff", []byte(`null`))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), "é", []byte(`{"id":7}`))
	f.Add(int64(math.MinInt64), int64(-1), "", []byte(`{"created_at":"2024-02-30T00:00:00Z"}`))
	f.Add(int64(1714557600), int64(0), "", []byte(`{"CREATED_AT":"2024-05-01T10:00:00Z","Id":"1","extra":[1,{}]}`))
	f.Add(int64(1714557600), int64(0), "id", []byte(`[`))
	f.Fuzz(func(t *testing.T, sec, nsec int64, id string, data []byte) {
		// Round trip of a Position from the fuzzer's numbers.
		at := time.Unix(sec, nsec).UTC()
		p := inordertype.Position{CreatedAt: at.Truncate(time.Microsecond), ID: id}
		b, err := json.Marshal(p)
		switch y := p.CreatedAt.Year(); {
		case p.IsBeginning():
			if err != nil || string(b) != `{"created_at":null,"id":null}` {
				t.Fatalf("beginning encodes as %s, %v", b, err)
			}
		case y < 0 || y > 9999:
			if err == nil {
				t.Fatalf("year %d encoded as %s; want an error", y, b)
			}
		case err != nil:
			t.Fatalf("%#v: %v", p, err)
		default:
			if !json.Valid(b) {
				t.Fatalf("%#v encodes as invalid JSON %q", p, b)
			}
			var back inordertype.Position
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("%#v encodes as %s, which does not decode: %v", p, b, err)
			}
			want := p
			want.ID = string([]rune(id)) // valid UTF-8 unchanged; each invalid byte U+FFFD
			if !same(back, want) {
				t.Fatalf("round trip of %#v through %s gave %#v", want, b, back)
			}
		}

		// Arbitrary bytes.
		var q inordertype.Position
		if err := json.Unmarshal(data, &q); err != nil {
			return
		}
		if q.CreatedAt.Location() != time.UTC {
			t.Fatalf("decoded %q to a time in %v, want UTC", data, q.CreatedAt.Location())
		}
		qb, err := json.Marshal(q)
		if err != nil {
			if y := q.CreatedAt.Year(); y >= 0 && y <= 9999 {
				t.Fatalf("decoded %q to %#v, which does not encode: %v", data, q, err)
			}
			return
		}
		var r inordertype.Position
		if err := json.Unmarshal(qb, &r); err != nil {
			t.Fatalf("decoded %q to %#v, encoded as %s, which does not decode: %v", data, q, qb, err)
		}
		want := q
		if q.IsBeginning() {
			want = inordertype.Position{}
		}
		if !same(r, want) {
			t.Fatalf("decoded %q to %#v, encoded as %s, decoded again as %#v", data, q, qb, r)
		}
	})
}

// same reports whether two positions are equal: the same instant, in UTC, and the same ID.
func same(a, b inordertype.Position) bool {
	return a.ID == b.ID && a.CreatedAt.Equal(b.CreatedAt) && a.CreatedAt.Location() == time.UTC &&
		b.CreatedAt.Location() == time.UTC
}
