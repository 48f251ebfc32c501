package keys

import "strings"

// forwardedFor returns the for= node of each forwarded-element of RFC 7239 Forwarded field
// values, in order: "" (an unparseable hop, where the walk stops) for an element without
// for=; none for an empty element.
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

// unquote removes the quotes and backslash escapes of a quoted-string, if s is one.
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
