package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// errNotUnicode refuses a JSON body that encoding/json would change (invalid UTF-8, a lone
// surrogate's \u escape, both made U+FFFD), which would make two identities one.
var errNotUnicode = errors.New("the body is not Unicode text (bytes that are not UTF-8, or a \\u escape of a lone surrogate; RFC 8259 §8): a key is decided as written, so it cannot be replaced")

// decodeJSON reads r's body, at most limit bytes, into v: one JSON value, no unknown
// fields, Unicode text (errNotUnicode).
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if !unicodeText(b) {
		return errNotUnicode
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value")
	}
	return nil
}

// unicodeText reports whether b is UTF-8 and every \u escape of a surrogate in it is half
// of a pair.
func unicodeText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // the escaped byte: skipped by the loop, so "\\\\" is one escape
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		c, ok := hex4(b[i+1:])
		if !ok {
			continue // not an escape encoding/json accepts: it refuses the body
		}
		i += 4
		switch {
		case c >= 0xdc00 && c <= 0xdfff:
			return false // a low surrogate alone
		case c >= 0xd800 && c <= 0xdbff:
			if i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				if lo, ok := hex4(b[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
					i += 6
					continue
				}
			}
			return false // a high surrogate without its low half
		}
	}
	return true
}

// hex4 is the value of the four hexadecimal digits that b starts with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil
}
