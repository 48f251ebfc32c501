// Package sfv appends RFC 9651 structured-field values to a byte slice, allocating
// nothing beyond the slice's growth: the RateLimit-Policy and RateLimit fields of
// httplimit and server are built with it, one request at a time.
//
// Each function appends a valid serialization of any input: integers are clamped to the
// 15 digits an Integer may have, and a String's bytes outside printable ASCII are written
// as %XX. Input that is already valid (an Integer in range, printable ASCII) is written
// as RFC 9651 §4.1 serializes it.
package sfv

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// MaxInteger is the largest Integer RFC 9651 can carry (§3.3.1); −MaxInteger the least.
const MaxInteger = 999_999_999_999_999

// ValidString reports whether s can be a String as it is (§3.3.3): printable ASCII
// only. AppendString writes any other byte as %XX.
func ValidString(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e })
}

// AppendString appends s as a String (§4.1.6): quoted, with '"' and '\' escaped. Bytes a
// String cannot hold (outside printable ASCII) are written as %XX, so any s gives a
// valid field.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	from := 0 // s[from:i] is plain and not yet written
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[from:i]...)
		from = i + 1
		if c == '"' || c == '\\' {
			b = append(b, '\\', c)
			continue
		}
		b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
	}
	b = append(b, s[from:]...)
	return append(b, '"')
}

// AppendIntParam appends the parameter ";key=v" with v an Integer (§4.1.4), clamped to
// [−MaxInteger, MaxInteger]. key must be a valid parameter key (lowercase letters).
func AppendIntParam(b []byte, key string, v int64) []byte {
	b = append(append(append(b, ';'), key...), '=')
	return strconv.AppendInt(b, max(-MaxInteger, min(v, MaxInteger)), 10)
}

// AppendBytesParam appends the parameter ";key=:…:" with v as a Byte Sequence (§4.1.8):
// base64 with padding between colons.
func AppendBytesParam(b []byte, key, v string) []byte {
	b = append(append(append(b, ';'), key...), "=:"...)
	b = base64.StdEncoding.AppendEncode(b, []byte(v))
	return append(b, ':')
}
