package keys

import (
	"errors"
	"fmt"
	"strings"
)

// Kind is the type of identity a key limits: any non-empty string.
type Kind string

const (
	User   Kind = "user"    // the application's user ID
	APIKey Kind = "api_key" // an API key's MAC (see Hasher), never the raw key
	IP     Kind = "ip"      // a client address or IPv6 prefix (see ClientIP)
)

// Identity is who is limited: a kind and an identifier of that kind. The zero Identity
// means no identity (a request without an API key, say).
type Identity struct {
	Kind Kind
	ID   string
}

// IsZero reports whether id identifies nobody (its ID is empty).
func (id Identity) IsZero() bool { return id.ID == "" }

// String returns "kind:id", both parts escaped as in Key.String.
func (id Identity) String() string { return joinEscaped(string(id.Kind), id.ID) }

// Key is everything that tells one rate-limit state from another: the owning policy, the
// identity, the route pattern (empty for every route) and the tier (empty for none).
type Key struct {
	Policy string
	Kind   Kind
	ID     string
	Route  string
	Tier   string
}

// Of returns the Key for identity id under policy, route and tier.
func Of(policy string, id Identity, route, tier string) Key {
	return Key{Policy: policy, Kind: id.Kind, ID: id.ID, Route: route, Tier: tier}
}

// Identity returns the identity part of k.
func (k Key) Identity() Identity { return Identity{Kind: k.Kind, ID: k.ID} }

const sep = ':'

// String encodes k as "policy:kind:id:route:tier", each field escaped (see the package doc).
func (k Key) String() string { return joinEscaped(k.Policy, string(k.Kind), k.ID, k.Route, k.Tier) }

// joinEscaped escapes each field and joins them with sep.
func joinEscaped(fields ...string) string {
	n := len(fields)
	for _, f := range fields {
		n += len(f)
	}
	var b strings.Builder
	b.Grow(n) // enough unless a byte needs escaping
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(sep)
		}
		escapeTo(&b, f)
	}
	return b.String()
}

// ParseIdentity is the inverse of Identity.String; any other string is an error wrapping
// ErrMalformedKey.
func ParseIdentity(s string) (Identity, error) {
	f, err := splitEscaped(s, 2)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Kind: Kind(f[0]), ID: f[1]}, nil
}

// ErrMalformedKey is returned by ParseKey for a string that Key.String cannot produce.
var ErrMalformedKey = errors.New("keys: malformed key")

// ParseKey is the inverse of Key.String; any other string is an error wrapping
// ErrMalformedKey.
func ParseKey(s string) (Key, error) {
	f, err := splitEscaped(s, 5)
	if err != nil {
		return Key{}, err
	}
	return Key{Policy: f[0], Kind: Kind(f[1]), ID: f[2], Route: f[3], Tier: f[4]}, nil
}

// splitEscaped splits s at sep into n fields and unescapes each.
func splitEscaped(s string, n int) ([]string, error) {
	f := strings.Split(s, string(sep))
	if len(f) != n {
		return nil, fmt.Errorf("%w: %d fields, want %d", ErrMalformedKey, len(f), n)
	}
	for i := range f {
		v, err := unescape(f[i])
		if err != nil {
			return nil, err
		}
		f[i] = v
	}
	return f, nil
}

// mustEscape reports whether byte c is written as %XX.
func mustEscape(c byte) bool {
	return c == '%' || c == sep || c == '{' || c == '}' || c <= ' ' || c >= 0x7f
}

const upperhex = "0123456789ABCDEF"

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(upperhex[c>>4])
			b.WriteByte(upperhex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
}

func unescape(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("%w: truncated escape", ErrMalformedKey)
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("%w: bad escape %q", ErrMalformedKey, s[i:i+3])
			}
			v := hi<<4 | lo
			if !mustEscape(v) {
				// A second spelling of the same Key.
				return "", fmt.Errorf("%w: needless escape %q", ErrMalformedKey, s[i:i+3])
			}
			b.WriteByte(v)
			i += 2
		case mustEscape(c):
			return "", fmt.Errorf("%w: unescaped byte %#x", ErrMalformedKey, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// unhex accepts only the upper-case hex digits escapeTo writes.
func unhex(c byte) (byte, bool) {
	i := strings.IndexByte(upperhex, c)
	return byte(i), i >= 0
}
