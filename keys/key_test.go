package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestKeyStringDistinguishesInputs(t *testing.T) {
	// Pairs that a naive ":"-join (or a join that does not escape '%') would merge.
	pairs := [][2]Key{
		{{Kind: User, ID: "a:b"}, {Kind: User, ID: "a", Route: "b"}},
		{{Kind: User, ID: "a", Route: ":b"}, {Kind: User, ID: "a:", Route: "b"}},
		{{Kind: "user:x", ID: "a"}, {Kind: User, ID: "x:a"}},
		{{Policy: "p:ip", Kind: "x"}, {Policy: "p", Kind: "ip:x"}},
		{{Kind: User, ID: "%3A"}, {Kind: User, ID: ":"}},
		{{Kind: User, ID: "%253A"}, {Kind: User, ID: "%3A"}},
		{{Kind: User, ID: "a", Tier: ""}, {Kind: User, ID: "a", Tier: " "}},
		{{Kind: User, ID: "{a}"}, {Kind: User, ID: "%7Ba%7D"}},
		{{Kind: IP, ID: "1.2.3.4"}, {Kind: User, ID: "1.2.3.4"}},
		{{Kind: User, ID: "a", Route: "GET /x", Tier: "free"}, {Kind: User, ID: "a", Route: "GET /x", Tier: "pro"}},
	}
	for _, p := range pairs {
		a, b := p[0].String(), p[1].String()
		if a == b {
			t.Errorf("%+v and %+v both encode to %q", p[0], p[1], a)
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	tests := []struct {
		key  Key
		want string
	}{
		{Key{Policy: "per-ip", Kind: IP, ID: "203.0.113.7"}, "per-ip:ip:203.0.113.7::"},
		{Key{Policy: "p", Kind: IP, ID: "2001:db8::/64"}, "p:ip:2001%3Adb8%3A%3A/64::"},
		{Key{Policy: "route", Kind: User, ID: "alice", Route: "GET /items/{id}", Tier: "pro"},
			"route:user:alice:GET%20/items/%7Bid%7D:pro"},
		{Key{Kind: User, ID: "ü%\x00\xff"}, ":user:%C3%BC%25%00%FF::"},
		{Key{}, "::::"},
	}
	for _, tt := range tests {
		got := tt.key.String()
		if got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.key, got, tt.want)
		}
		if strings.ContainsAny(got, "{} ") {
			t.Errorf("%q contains a brace or space", got)
		}
		back, err := ParseKey(got)
		if err != nil || back != tt.key {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", got, back, err, tt.key)
		}
	}
}

func TestParseKeyRejectsOtherSpellings(t *testing.T) {
	for _, s := range []string{
		"", "a:b:c:d", "a:b:c:d:e:f", "a:b:c:d:%", "a:b:c:d:%4", "a:b:c:d:%zz",
		"a:b:c:d:%41",  // 'A' needs no escape: a second spelling of "A"
		"a:b:c:d:%3a",  // lower-case hex: a second spelling of "%3A"
		"a:b:c:d:{x}",  // unescaped brace
		"a:b:c:d:x y",  // unescaped space
		"a:b:c:d:\xff", // unescaped non-ASCII
	} {
		if k, err := ParseKey(s); !errors.Is(err, ErrMalformedKey) {
			t.Errorf("ParseKey(%q) = %+v, %v; want ErrMalformedKey", s, k, err)
		}
	}
}

func TestParseIdentity(t *testing.T) {
	for _, id := range []Identity{{Kind: User, ID: "a:b"}, {Kind: IP, ID: "2001:db8::/64"}, {Kind: APIKey, ID: "00ff"}, {Kind: User, ID: "%{}"}} {
		if got, err := ParseIdentity(id.String()); err != nil || got != id {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want %+v", id.String(), got, err, id)
		}
	}
	for _, bad := range []string{"user", "user:a:b", "user:%zz", "ip:2001:db8::1"} {
		if id, err := ParseIdentity(bad); !errors.Is(err, ErrMalformedKey) {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want ErrMalformedKey", bad, id, err)
		}
	}
}

func TestIdentityString(t *testing.T) {
	if got, want := (Identity{Kind: User, ID: "a:b"}).String(), "user:a%3Ab"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if !(Identity{Kind: User}).IsZero() || (Identity{ID: "x"}).IsZero() {
		t.Error("IsZero is about the ID")
	}
	k := Of("p", Identity{Kind: APIKey, ID: "mac"}, "r", "t")
	if k.Identity() != (Identity{Kind: APIKey, ID: "mac"}) || k.Policy != "p" || k.Route != "r" || k.Tier != "t" {
		t.Errorf("Of = %+v", k)
	}
}

// FuzzKey checks that Key.String is injective by checking ParseKey inverts it, and that
// ParseKey accepts only strings Key.String produces.
func FuzzKey(f *testing.F) {
	f.Add("p", "user", "a:b", "GET /{x}", "pro")
	f.Add("", "", "%", "", "")
	f.Fuzz(func(t *testing.T, policy, kind, id, route, tier string) {
		k := Key{Policy: policy, Kind: Kind(kind), ID: id, Route: route, Tier: tier}
		s := k.String()
		back, err := ParseKey(s)
		if err != nil || back != k {
			t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", s, back, err, k)
		}
		// Any string ParseKey accepts re-encodes to itself: one spelling per Key.
		if k2, err := ParseKey(id); err == nil && k2.String() != id {
			t.Fatalf("ParseKey accepted %q, which re-encodes as %q", id, k2.String())
		}
	})
}

func BenchmarkKeyString(b *testing.B) {
	k := Key{Policy: "orders", Kind: APIKey, ID: "11bc132d0e499179c86c82fd1183210ff7de8f366026ce8d36020e387e0dfa55",
		Route: "POST /v1/orders/{id}", Tier: "free"}
	b.ReportAllocs()
	for b.Loop() {
		_ = k.String()
	}
}
