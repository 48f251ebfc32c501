package keys

import "testing"

// FuzzKeyRoundTrip: Key.String is injective and ParseKey inverts it, for any bytes in any
// field; Identity.String never equals another identity's.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("per-ip", "ip", "203.0.113.7", "GET /items/{id}", "pro")
	f.Add("a:b", "c%3A", "%", "", ":")
	f.Add("", "", "", "", "")
	f.Add("p", "api_key", "\x00\xff}{", "/x", "%25")
	f.Fuzz(func(t *testing.T, policy, kind, id, route, tier string) {
		k := Key{Policy: policy, Kind: Kind(kind), ID: id, Route: route, Tier: tier}
		s := k.String()
		back, err := ParseKey(s)
		if err != nil || back != k {
			t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", s, back, err, k)
		}
		// Moving a separator between fields gives another key.
		other := Key{Policy: policy + ":" + kind, ID: id, Route: route, Tier: tier}
		if other != k && other.String() == s {
			t.Fatalf("%+v and %+v share %q", k, other, s)
		}
		id1, id2 := Identity{Kind: Kind(kind), ID: id}, Identity{Kind: Kind(kind + ":" + id)}
		if id1 != id2 && id1.String() == id2.String() {
			t.Fatalf("identities %+v and %+v share %q", id1, id2, id1.String())
		}
	})
}

// FuzzParseKey: every string either is the encoding of exactly one Key (and then
// re-encodes to itself) or is rejected with ErrMalformedKey; nothing panics.
func FuzzParseKey(f *testing.F) {
	f.Add("per-ip:ip:203.0.113.7::")
	f.Add("a%3Ab:c::%25:")
	f.Add("%zz:a:b:c:d")
	f.Add("::::")
	f.Add(":::")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		if got := k.String(); got != s {
			t.Fatalf("ParseKey(%q) = %+v, which encodes as %q", s, k, got)
		}
	})
}
