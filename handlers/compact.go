package handlers

import (
	"slices"
)

// maxCompactDepth is encoding/json's limit on nested arrays and objects. A deeper document is left to
// json.Compact, which rejects it with its own wording.
const maxCompactDepth = 10000

// stringStop marks the bytes that end a fast run inside a JSON string: the closing quote, the escape
// character, control characters (which are invalid there), the three HTML characters encoding/json escapes,
// and 0xE2, the first byte of U+2028 and U+2029. Every other byte, invalid UTF-8 included, is copied as it
// is, as encoding/json copies it for a json.RawMessage.
var stringStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	for _, c := range []byte{'"', '\\', '<', '>', '&', 0xE2} {
		t[c] = true
	}
	return t
}()

// isHex reports whether c is a hexadecimal digit, as a \u escape needs four of them.
func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// space marks JSON whitespace, which compacting drops outside strings.
var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// isSpace reports whether c is JSON whitespace: one load, which beat four comparisons on the path between
// every two tokens.
func isSpace(c byte) bool {
	return space[c]
}

// appendCompactRaw appends src, one JSON value, to dst as json.Marshal writes a json.RawMessage holding it:
// whitespace outside strings dropped, '<', '>', '&', U+2028 and U+2029 escaped, everything else (invalid
// UTF-8 in strings too) copied unchanged. It validates in the same pass with a table-driven skip through
// strings and an explicit stack for nesting, several times faster than encoding/json's byte-by-byte
// scanner, which was half of the CPU of a stream of large jsonb documents. It reports false, with dst as it
// was, on anything encoding/json would reject (and on nesting deeper than encoding/json allows), so that
// the caller can leave the error and its wording to encoding/json.
func appendCompactRaw(dst, src []byte) ([]byte, bool) {
	orig := len(dst)
	n := len(src)
	dst = slices.Grow(dst, n) // the compact form is no longer unless there is something to escape
	var stackArr [64]byte
	stack := stackArr[:0] // '{' or '[' for each open container
	start, i := 0, 0      // src[start:i] is yet to be copied to dst
	dst, start, i = skipSpace(dst, src, start, i)
	for {
		// A value starts at src[i].
		if i >= n {
			return dst[:orig], false
		}
		switch c := src[i]; c {
		case '{', '[':
			if len(stack) >= maxCompactDepth {
				return dst[:orig], false
			}
			stack = append(stack, c)
			i++
			dst, start, i = skipSpace(dst, src, start, i)
			if i < n && (c == '{' && src[i] == '}' || c == '[' && src[i] == ']') {
				i++
				stack = stack[:len(stack)-1]
				break // to the end of a value
			}
			if c == '[' {
				continue // to the first element
			}
			// The first member's name.
			var ok bool
			if dst, start, i, ok = compactName(dst, src, start, i); !ok {
				return dst[:orig], false
			}
			continue
		case '"':
			var ok bool
			if dst, start, i, ok = compactString(dst, src, start, i); !ok {
				return dst[:orig], false
			}
		case 't', 'f', 'n':
			word := literals[c]
			if len(src)-i < len(word) || string(src[i:i+len(word)]) != word {
				return dst[:orig], false
			}
			i += len(word)
		default:
			var ok bool
			if i, ok = skipNumber(src, i); !ok {
				return dst[:orig], false
			}
		}
		// A value ends at src[i]: what follows is the end, a comma or a closing bracket.
		for {
			dst, start, i = skipSpace(dst, src, start, i)
			if len(stack) == 0 {
				if i != n {
					return dst[:orig], false
				}
				return append(dst, src[start:]...), true
			}
			if i >= n {
				return dst[:orig], false
			}
			top := stack[len(stack)-1]
			c := src[i]
			if c == '}' && top == '{' || c == ']' && top == '[' {
				i++
				stack = stack[:len(stack)-1]
				continue
			}
			if c != ',' {
				return dst[:orig], false
			}
			i++
			dst, start, i = skipSpace(dst, src, start, i)
			if top == '{' {
				var ok bool
				if dst, start, i, ok = compactName(dst, src, start, i); !ok {
					return dst[:orig], false
				}
			}
			break // to the next value
		}
	}
}

// literals are the words a JSON value may be, by their first byte.
var literals = [256]string{'t': "true", 'f': "false", 'n': "null"}

// skipSpace drops the whitespace at src[i:], copying src[start:i] before it to dst and moving start past
// it. It takes and returns appendCompactRaw's state (dst, start, i).
func skipSpace(dst, src []byte, start, i int) ([]byte, int, int) {
	if i < len(src) && isSpace(src[i]) {
		dst = append(dst, src[start:i]...)
		for i < len(src) && isSpace(src[i]) {
			i++
		}
		start = i
	}
	return dst, start, i
}

// compactName reads a member's name at src[i], the colon after it and the whitespace around that, leaving i
// at the member's value. It takes and returns appendCompactRaw's state (dst, start, i).
func compactName(dst, src []byte, start, i int) ([]byte, int, int, bool) {
	n := len(src)
	if i >= n || src[i] != '"' {
		return dst, start, i, false
	}
	var ok bool
	if dst, start, i, ok = compactString(dst, src, start, i); !ok {
		return dst, start, i, false
	}
	dst, start, i = skipSpace(dst, src, start, i)
	if i >= n || src[i] != ':' {
		return dst, start, i, false
	}
	i++
	dst, start, i = skipSpace(dst, src, start, i)
	return dst, start, i, true
}

// compactString reads the string whose opening quote is src[i], leaving i after its closing quote. Bytes
// that need no attention are skipped through the stringStop table and copied later in one run; only the
// HTML characters and line and paragraph separators interrupt the run, to be escaped as encoding/json does.
func compactString(dst, src []byte, start, i int) ([]byte, int, int, bool) {
	n := len(src)
	i++
	for {
		for i < n && !stringStop[src[i]] {
			i++
		}
		if i >= n {
			return dst, start, i, false
		}
		switch c := src[i]; c {
		case '"':
			return dst, start, i + 1, true
		case '\\':
			if i+1 >= n {
				return dst, start, i, false
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if n-i < 6 || !isHex(src[i+2]) || !isHex(src[i+3]) || !isHex(src[i+4]) || !isHex(src[i+5]) {
					return dst, start, i, false
				}
				i += 6
			default:
				return dst, start, i, false
			}
		case '<', '>', '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			i++
			start = i
		case 0xE2:
			if i+2 < n && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8 {
				dst = append(dst, src[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[src[i+2]&0xF])
				i += 3
				start = i
			} else {
				i++
			}
		default: // a control character
			return dst, start, i, false
		}
	}
}

// skipNumber reads the number at src[i] by JSON's grammar, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// leaving i after it. What follows it is for the caller to judge ("01" fails there, at the '1').
func skipNumber(src []byte, i int) (int, bool) {
	n := len(src)
	if i < n && src[i] == '-' {
		i++
	}
	if i >= n {
		return i, false
	}
	switch c := src[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < n && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < n && src[i] == '.' {
		i++
		if i >= n || src[i] < '0' || src[i] > '9' {
			return i, false
		}
		for i < n && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	}
	if i < n && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < n && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= n || src[i] < '0' || src[i] > '9' {
			return i, false
		}
		for i < n && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	}
	return i, true
}
