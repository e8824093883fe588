package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/inorder-dev/inorder/handlers"
)

// FuzzCompactRaw holds the compactor behind a json.RawMessage value to json.Marshal of the same bytes: for
// any input both fail, or both succeed with the same bytes (compacted, HTML characters and line and
// paragraph separators escaped, invalid UTF-8 copied). The compactor is called directly, since AppendJSON
// falls back to encoding/json on a rejection and would hide a valid document wrongly rejected. It appends
// after a prefix, which must be left as it was, whatever the outcome.
func FuzzCompactRaw(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,2,{"b":null}]}`, `[[[[]]],{},[{}],{"":{"":[]}}]`, ` [ 1 , [ 2 , { "x" : [ ] } ] ] `,
		`"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"`, `"\u00E9\uDFFF\u0000"`, `"\x"`, `"\u12"`, `"\u12g4"`, `"\`,
		"\"bad\xff\xfe utf-8 \xe2\x80\"", "\"\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa\xe2\x81\xa8\xe2\"", "\xe2\x80\xa8",
		`"<script>&</script>"`, `{"<":">","&":[" & "]}`, "\"\u2028\u2029\"", "<", "[&]",
		`-0`, `1e5`, `1.5E-3`, `-12.25e+10`, `0`, `01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `-01`, `0x1`, `1.e5`, `00`,
		"\t\n\r {\t\"a\"\n:\r1 ,\"b\" : [ true , false , null ] }\r\n", " ", "", "\v1", "1\f",
		`[1,]`, `{"a":1,}`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `{"a":1 "b":2}`, `1 2`, `{} {}`, `[]]`,
		`{]`, `[}`, `tru`, `true`, `truex`, `nul`, `null`, `false`, `fals`, `True`, `nulll`, `"abc`, "\"a\nb\"", "\"\x1f\"",
		"\"\x7f\"", `"a"b`, `[1]x`, "[\"\\u0041\"]", `{"a":{"b":{"c":[[["d"]]]}}}`, "\x00", "1\x00",
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
		strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001), strings.Repeat("[", 10001),
	} {
		f.Add([]byte(s))
	}
	f.Add(docOfItems(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		if b == nil {
			b = []byte{} // a nil json.RawMessage is null, a case AppendJSON handles before compacting
		}
		prefix := []byte(`{"p":`)
		got, ok := handlers.AppendCompactRaw(bytes.Clone(prefix), b)
		want, err := json.Marshal(json.RawMessage(b))
		if !bytes.HasPrefix(got, prefix) {
			t.Fatalf("the prefix %q became %q", prefix, got)
		}
		switch {
		case !ok && err == nil:
			t.Fatalf("rejected %q, which json.Marshal writes as %q", b, want)
		case ok && err != nil:
			t.Fatalf("accepted %q as %q, which json.Marshal rejects: %v", b, got[len(prefix):], err)
		case !ok && len(got) != len(prefix):
			t.Fatalf("rejected %q but left %q after the prefix", b, got[len(prefix):])
		case ok && !bytes.Equal(got[len(prefix):], want):
			t.Fatalf("%q: wrote %q, json.Marshal %q", b, got[len(prefix):], want)
		}
	})
}

// docOfItems is jsonb as Postgres renders it as text: an array of n objects, with a space after each colon
// and comma, the shape of the documents of the stream that was profiled.
func docOfItems(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"line": %d, "sku": "%08x-%04x-sku", "qty": %d, "note": "item %d"}`, i+1, i*2654435761,
			i&0xffff, i%7+1, i+1)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// BenchmarkCompactRaw compares json.Compact, which the RawMessage path called before, with the compactor
// that replaced it, and a row holding the document end to end, on a 1 MB document of the profiled shape.
func BenchmarkCompactRaw(b *testing.B) {
	doc := docOfItems(1 << 20 / (len(docOfItems(1000)) / 1000))
	b.Logf("a document of %d bytes", len(doc))
	b.Run("json.Compact", func(b *testing.B) {
		var buf bytes.Buffer
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			buf.Reset()
			if err := json.Compact(&buf, doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendCompactRaw", func(b *testing.B) {
		var buf []byte
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			var ok bool
			if buf, ok = handlers.AppendCompactRaw(buf[:0], doc); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("Row.AppendJSON", func(b *testing.B) {
		row := handlers.Row{Columns: []string{"id", "items"}, Values: []any{int64(1), json.RawMessage(doc)}}
		var buf []byte
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			var err error
			if buf, err = row.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
