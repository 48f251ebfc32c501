package keys

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Header names ClientIP knows how to read.
const (
	HeaderForwarded     = "Forwarded"       // RFC 7239; its for= parameters are the hops
	HeaderXForwardedFor = "X-Forwarded-For" // a comma-separated list of hops
	HeaderXRealIP       = "X-Real-IP"       // one address, set by the proxy
)

// Default IPv4 and IPv6 aggregation prefixes of ClientIP.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// ErrNoClientIP is returned when the connection's peer address cannot be parsed (a Unix
// socket, say).
var ErrNoClientIP = errors.New("keys: no client IP")

// ClientIP finds the client address of an HTTP request. The zero value trusts no proxy:
// the client is the connection's peer (RemoteAddr). It is safe for concurrent use while
// its fields are not modified.
//
// When the peer is in TrustedProxies, the one header named by Header is read, as nginx's
// real_ip_header: its hops, right to left, are skipped while trusted, and the first
// untrusted hop is the client (the left-most if all are trusted). At a hop that does not
// parse ("unknown", "_node", garbage) the walk stops at the hop to its right (or the
// peer), so no value lets a request pick its own identity. A trusted peer without the
// header is the client. Name the header your trusted proxies set or append to.
type ClientIP struct {
	// TrustedProxies are the proxies whose forwarding header is believed (IPv4-mapped
	// prefixes as IPv4).
	TrustedProxies []netip.Prefix
	// Header is the forwarding header to read: "Forwarded" (RFC 7239), or any header
	// holding a comma-separated list of addresses (optionally with ports or brackets).
	// Empty means X-Forwarded-For.
	Header string
	// IPv4Prefix is the prefix length IPv4 clients are aggregated to; 0 means 32.
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 clients are aggregated to; 0 means 64.
	IPv6Prefix int
}

// ParseClientIPHeader returns the canonical name of Forwarded, X-Forwarded-For or
// X-Real-IP, matched case-insensitively, or an error naming them.
func ParseClientIPHeader(s string) (string, error) {
	for _, h := range []string{HeaderXForwardedFor, HeaderXRealIP, HeaderForwarded} {
		if strings.EqualFold(s, h) {
			return h, nil
		}
	}
	return "", fmt.Errorf("keys: client IP header %q: want %s, %s or %s", s, HeaderXForwardedFor, HeaderXRealIP, HeaderForwarded)
}

// ParsePrefixes parses CIDR prefixes or addresses (as /32 or /128) for TrustedProxies.
func ParsePrefixes(s ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s))
	for _, v := range s {
		v = strings.TrimSpace(v)
		p, err := netip.ParsePrefix(v)
		if !strings.Contains(v, "/") {
			var a netip.Addr
			a, err = netip.ParseAddr(v)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("keys: trusted proxy %q: %w", v, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Addr returns the client's address, unmapped and without zone, not aggregated. The error
// wraps ErrNoClientIP.
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: cannot parse remote address %q", ErrNoClientIP, r.RemoteAddr)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	name := cmp.Or(c.Header, HeaderXForwardedFor)
	hops := listHops
	if http.CanonicalHeaderKey(name) == HeaderForwarded {
		hops = forwardedFor
	}
	return c.walk(peer, hops(r.Header.Values(name))), nil
}

// Trusted reports whether r comes straight from one of TrustedProxies, whose headers are
// believed.
func (c *ClientIP) Trusted(r *http.Request) bool {
	peer, ok := parseHop(r.RemoteAddr)
	return ok && c.trusted(peer)
}

// walk returns the right-most untrusted hop, or peer for no hops; see ClientIP.
func (c *ClientIP) walk(peer netip.Addr, hops []string) netip.Addr {
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return client
		}
		client = a
		if !c.trusted(a) {
			return a
		}
	}
	return client
}

// Prefix returns the client's address aggregated (Aggregate).
func (c *ClientIP) Prefix(r *http.Request) (netip.Prefix, error) {
	a, err := c.Addr(r)
	if err != nil {
		return netip.Prefix{}, err
	}
	return c.Aggregate(a)
}

// Aggregate returns the prefix a client at a is limited as: a unmapped and without zone,
// masked to IPv4Prefix or IPv6Prefix bits. Every front end identifies clients with it.
func (c *ClientIP) Aggregate(a netip.Addr) (netip.Prefix, error) {
	a = a.Unmap().WithZone("")
	bits := cmp.Or(c.IPv6Prefix, DefaultIPv6Prefix)
	if a.Is4() {
		bits = cmp.Or(c.IPv4Prefix, DefaultIPv4Prefix)
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("keys: aggregating %v: %w", a, err)
	}
	return p, nil
}

// ParseID returns the ID of the IP Identity an operator writes as s: an address, or a
// prefix at least as long as the aggregation, names its client's (Aggregate); a shorter
// prefix is masked, as written.
func (c *ClientIP) ParseID(s string) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		p, err := c.Aggregate(a)
		if err != nil {
			return "", err
		}
		return PrefixID(p), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("keys: %q is not an IP address or prefix", s)
	}
	if !p.Addr().Is4In6() && p.Addr().Zone() == "" {
		if agg, err := c.Aggregate(p.Addr()); err == nil && p.Bits() >= agg.Bits() {
			return PrefixID(agg), nil
		}
	}
	return PrefixID(p.Masked()), nil
}

// Identity returns the IP Identity of the request's client: the address itself when the
// prefix is a full-length one ("203.0.113.7"), else the prefix ("2001:db8:1:2::/64").
func (c *ClientIP) Identity(r *http.Request) (Identity, error) {
	p, err := c.Prefix(r)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Kind: IP, ID: PrefixID(p)}, nil
}

// PrefixID formats p the way Identity does: the bare address for a full-length prefix,
// else CIDR notation.
func PrefixID(p netip.Prefix) string {
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if pa := p.Addr(); pa.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(pa.Unmap(), p.Bits()-96)
		}
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop parses one hop: "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:80", optionally quoted. The result is unmapped and zone-free.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, port, closed := strings.Cut(rest, "]")
		a, err = netip.ParseAddr(host)
		if !closed || err == nil && !a.Is6() || port != "" && !validPort(port) {
			return netip.Addr{}, false
		}
	} else if err != nil {
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), err == nil
}

// validPort reports whether s is ":" followed by 1-5 digits or an obfuscated port
// ("_abc", RFC 7239).
func validPort(s string) bool {
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	_, err := strconv.ParseUint(s[1:], 10, 64)
	return s[1] == '_' || len(s) <= 6 && err == nil
}

// listHops splits comma-separated header values, across every field line in order.
func listHops(values []string) []string {
	var hops []string
	for _, v := range values {
		for h := range strings.SplitSeq(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	return hops
}
