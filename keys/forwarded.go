package keys

import "strings"

// forwardedFor returns the for= node of each forwarded-element of RFC 7239 Forwarded field
// values, in order. An element without for= yields "" (an unparseable hop), so the walk
// stops there rather than skipping a hop it cannot see. Empty list elements are skipped,
// as RFC 9110's #rule allows.
//
//	Forwarded   = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair = token "=" value
//	value          = token / quoted-string
func forwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, elem := range splitQuoted(v, ',') {
			if strings.TrimSpace(elem) == "" {
				continue
			}
			node := ""
			for _, pair := range splitQuoted(elem, ';') {
				name, value, ok := strings.Cut(pair, "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					node = unquote(strings.TrimSpace(value))
					break
				}
			}
			hops = append(hops, node)
		}
	}
	return hops
}

// splitQuoted splits s at every sep that is outside a quoted-string.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++ // quoted-pair: skip the escaped byte
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote removes the quotes and backslash escapes of a quoted-string; a token is
// returned as is.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
