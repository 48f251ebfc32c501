package keys

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestParseIDIsTheRequestsIdentity: the identity an operator writes for an address or a
// prefix within the aggregation is the one a request from there gets (Identity), with the
// default and with configured prefixes.
func TestParseIDIsTheRequestsIdentity(t *testing.T) {
	for _, c := range []ClientIP{{}, {IPv4Prefix: 24, IPv6Prefix: 48}} {
		for _, tt := range []struct{ written, peer string }{
			{"203.0.113.7", "203.0.113.7"},
			{"::ffff:203.0.113.7", "203.0.113.7"},
			{"2001:db8:1:2::99", "2001:db8:1:2::5"},
			{"2001:db8:1:2::99/128", "2001:db8:1:2::5"},
			{"2001:db8:1:2:3::/80", "2001:db8:1:2::5"},
			{"203.0.113.7/32", "203.0.113.7"},
		} {
			got, err := c.ParseID(tt.written)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(tt.peer), 4711).String()
			want, werr := c.Identity(r)
			if err != nil || werr != nil || got != want.ID {
				t.Errorf("%+v: ParseID(%q) = %q, %v; a request from %s is %q, %v", c, tt.written, got, err, tt.peer, want.ID, werr)
			}
		}
	}
	// A prefix wider than the aggregation is kept, masked.
	if got, err := (&ClientIP{}).ParseID("2001:db8:1::7/48"); err != nil || got != "2001:db8:1::/48" {
		t.Errorf("ParseID(/48) = %q, %v", got, err)
	}
	if _, err := (&ClientIP{}).ParseID("not-an-ip"); err == nil {
		t.Error("ParseID(not-an-ip): no error")
	}
}
