package keys

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"
)

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes(s...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(remote string, header ...string) *http.Request {
	r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func TestClientIPAddr(t *testing.T) {
	proxies := mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1")
	tests := []struct {
		name    string
		trusted []netip.Prefix
		header  string
		req     *http.Request
		want    string
	}{
		{"no proxies: peer", nil, "", request("203.0.113.7:5555"), "203.0.113.7"},
		{"spoofed XFF from untrusted peer ignored", proxies, "",
			request("203.0.113.7:5555", "X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"spoofed Forwarded from untrusted peer ignored", proxies, HeaderForwarded,
			request("203.0.113.7:5555", "Forwarded", "for=1.1.1.1"), "203.0.113.7"},
		{"spoofed X-Real-IP from untrusted peer ignored", proxies, HeaderXRealIP,
			request("203.0.113.7:5555", "X-Real-IP", "1.1.1.1"), "203.0.113.7"},
		{"XFF from trusted proxy used", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"client-supplied left entries skipped: right-most untrusted hop", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6, 198.51.100.9"), "198.51.100.9"},
		{"trusted hops skipped", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.9.9.9, 192.0.2.1"), "198.51.100.9"},
		{"several XFF field lines are one list", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.9, 10.0.0.1"), "198.51.100.9"},
		{"every hop trusted: left-most", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "10.0.0.2, 10.0.0.1"), "10.0.0.2"},
		{"garbage hop stops the walk at the nearest parsed hop", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6, garbage, 10.0.0.1"), "10.0.0.1"},
		{"garbage as the only hop: the peer", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "garbage"), "10.1.2.3"},
		{"trusted peer without header is the client", proxies, "", request("10.1.2.3:443"), "10.1.2.3"},
		{"XFF with ports and brackets", proxies, "",
			request("10.1.2.3:443", "X-Forwarded-For", "[2001:db8::5]:8080, 10.0.0.1:99"), "2001:db8::5"},
		{"Forwarded RFC 7239", proxies, HeaderForwarded,
			request("10.1.2.3:443", "Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https;by=10.0.0.1, for=10.0.0.9`),
			"2001:db8:cafe::17"},
		{"Forwarded: quoted commas and case-insensitive name", proxies, HeaderForwarded,
			request("10.1.2.3:443", "Forwarded", `by="a,b";For=198.51.100.1`), "198.51.100.1"},
		{"Forwarded: unknown stops the walk", proxies, HeaderForwarded,
			request("10.1.2.3:443", "Forwarded", "for=6.6.6.6, for=unknown, for=10.0.0.4"), "10.0.0.4"},
		{"Forwarded: element without for stops the walk", proxies, HeaderForwarded,
			request("10.1.2.3:443", "Forwarded", "for=6.6.6.6, proto=http"), "10.1.2.3"},
		{"X-Real-IP", proxies, HeaderXRealIP,
			request("10.1.2.3:443", "X-Real-IP", "198.51.100.3"), "198.51.100.3"},
		{"only configured headers are read", proxies, HeaderXRealIP,
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6", "X-Real-IP", "198.51.100.3"), "198.51.100.3"},
		{"X-Real-IP ignored when the header is X-Forwarded-For", proxies, HeaderXForwardedFor,
			request("10.1.2.3:443", "X-Real-IP", "6.6.6.6"), "10.1.2.3"},
		{"Forwarded ignored by default", proxies, "",
			request("10.1.2.3:443", "Forwarded", "for=6.6.6.6"), "10.1.2.3"},
		{"X-Forwarded-For ignored when the header is Forwarded", proxies, HeaderForwarded,
			request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6", "Forwarded", "for=198.51.100.4"), "198.51.100.4"},
		{"X-Real-IP: a trusted hop is skipped to the peer", proxies, HeaderXRealIP,
			request("10.1.2.3:443", "X-Real-IP", "10.0.0.7"), "10.0.0.7"},
		{"IPv4-mapped peer unmapped", nil, "", request("[::ffff:203.0.113.7]:80"), "203.0.113.7"},
		{"IPv4-mapped peer matches IPv4 proxy prefix", proxies, "",
			request("[::ffff:10.0.0.1]:80", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"IPv4-mapped trusted prefix matches IPv4 peer", mustPrefixes(t, "::ffff:10.0.0.0/104"), "",
			request("10.0.0.1:80", "X-Forwarded-For", "::ffff:198.51.100.9"), "198.51.100.9"},
		{"IPv6 peer in trusted /48", proxies, "",
			request("[2001:db8:ffff:1::1]:80", "X-Forwarded-For", "2001:db8:1::1"), "2001:db8:1::1"},
		{"zone dropped", nil, "", request("[fe80::1%eth0]:80"), "fe80::1"},
		{"remote address without port", nil, "", request("203.0.113.7"), "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &ClientIP{TrustedProxies: tt.trusted, Header: tt.header}
			got, err := c.Addr(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("Addr = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseClientIPHeader(t *testing.T) {
	for in, want := range map[string]string{"x-forwarded-for": HeaderXForwardedFor, "X-REAL-IP": HeaderXRealIP, "forwarded": HeaderForwarded} {
		if got, err := ParseClientIPHeader(in); err != nil || got != want {
			t.Errorf("ParseClientIPHeader(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "X-Client-IP", "True-Client-IP"} {
		if _, err := ParseClientIPHeader(bad); err == nil {
			t.Errorf("ParseClientIPHeader(%q) accepted", bad)
		}
	}
}

func TestClientIPTrusted(t *testing.T) {
	c := &ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	if !c.Trusted(request("10.1.2.3:80")) || c.Trusted(request("203.0.113.7:80")) || c.Trusted(request("/run/app.sock")) {
		t.Error("Trusted is not whether the peer is a trusted proxy")
	}
	if (&ClientIP{}).Trusted(request("10.1.2.3:80")) {
		t.Error("the zero ClientIP trusts a peer")
	}
}

func TestClientIPNoAddress(t *testing.T) {
	var c ClientIP
	for _, remote := range []string{"", "@", "/run/app.sock", "host:80"} {
		if _, err := c.Identity(request(remote)); !errors.Is(err, ErrNoClientIP) {
			t.Errorf("RemoteAddr %q: err = %v, want ErrNoClientIP", remote, err)
		}
	}
}

func TestClientIPIdentityAggregates(t *testing.T) {
	tests := []struct {
		name   string
		c      ClientIP
		remote []string // all must give want
		want   string
	}{
		{"IPv6 rotating inside one /64", ClientIP{},
			[]string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", "[2001:db8:1:2:abcd::9]:3"},
			"2001:db8:1:2::/64"},
		{"IPv6 /56", ClientIP{IPv6Prefix: 56},
			[]string{"[2001:db8:1:200::1]:1", "[2001:db8:1:2ff::1]:1"}, "2001:db8:1:200::/56"},
		{"IPv6 /128", ClientIP{IPv6Prefix: 128}, []string{"[2001:db8::1]:1"}, "2001:db8::1"},
		{"IPv4 whole address", ClientIP{}, []string{"203.0.113.7:1"}, "203.0.113.7"},
		{"IPv4-mapped is IPv4, not a /64", ClientIP{}, []string{"[::ffff:203.0.113.7]:1"}, "203.0.113.7"},
		{"IPv4 /24", ClientIP{IPv4Prefix: 24}, []string{"203.0.113.7:1", "203.0.113.200:1"}, "203.0.113.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, remote := range tt.remote {
				id, err := tt.c.Identity(request(remote))
				if err != nil {
					t.Fatal(err)
				}
				if id != (Identity{Kind: IP, ID: tt.want}) {
					t.Errorf("%s: Identity = %+v, want ip %s", remote, id, tt.want)
				}
			}
		})
	}
	// Neighbouring /64s stay apart.
	var c ClientIP
	a, _ := c.Identity(request("[2001:db8:1:2::1]:1"))
	b, _ := c.Identity(request("[2001:db8:1:3::1]:1"))
	if a == b {
		t.Errorf("different /64s share identity %v", a)
	}
	if _, err := (&ClientIP{IPv6Prefix: 129}).Identity(request("[2001:db8::1]:1")); err == nil {
		t.Error("prefix length 129 accepted")
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes("10.1.2.3/8", " 192.0.2.1 ", "2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("prefix %d = %v, want %v", i, p, want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", ""} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted", bad)
		}
	}
}

func BenchmarkClientIPTrustedXFF(b *testing.B) {
	c := &ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	r := request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Identity(r); err != nil {
			b.Fatal(err)
		}
	}
}
