package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
)

// get sends a real HTTP request to srv with an X-Forwarded-For header and returns the
// status.
func get(t *testing.T, srv *httptest.Server, xff string) int {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", xff)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestForwardedForTrustedOnlyFromProxies(t *testing.T) {
	loopback, err := keys.ParsePrefixes("127.0.0.0/8", "::1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    keys.ClientIP
		// allowed is how many of 4 requests, each claiming a different address in
		// X-Forwarded-For, pass a limit of 2 per client.
		allowed int
	}{
		// The test client connects from loopback. Untrusted, its X-Forwarded-For is a
		// spoof: all 4 requests are one client.
		{"no trusted proxy: header ignored", keys.ClientIP{}, 2},
		{"peer not among trusted proxies: header ignored",
			keys.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, 2},
		// Trusted, each claimed address is its own client.
		{"trusted proxy: header used", keys.ClientIP{TrustedProxies: loopback}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newStore(t)
			m := mustNew(t, Config{Limiter: store, Policies: []Policy{
				{Name: "per-ip", Limit: sluice.PerHour(2), Key: ByIP(&tt.c)},
			}})
			srv := httptest.NewServer(m.Handler(okHandler))
			defer srv.Close()
			allowed := 0
			for i := range 4 {
				if get(t, srv, fmt.Sprintf("203.0.113.%d", i+1)) == http.StatusOK {
					allowed++
				}
			}
			if allowed != tt.allowed {
				t.Errorf("%d of 4 requests allowed, want %d", allowed, tt.allowed)
			}
		})
	}
}

func TestIPv6ClientsInOnePrefixShareALimit(t *testing.T) {
	tests := []struct {
		name    string
		c       keys.ClientIP
		remotes []string // each sends one request, in order
		want    []int
	}{
		{"rotating inside one /64 (default)", keys.ClientIP{},
			[]string{"[2001:db8:1:2::1]:1000", "[2001:db8:1:2::dead:beef]:1001", "[2001:db8:1:2:ffff::9]:1002", "[2001:db8:1:3::1]:1003"},
			[]int{200, 200, 429, 200}}, // the fourth is another /64
		{"rotating inside one /56", keys.ClientIP{IPv6Prefix: 56},
			[]string{"[2001:db8:1:200::1]:1", "[2001:db8:1:2ff::1]:1", "[2001:db8:1:280::1]:1"},
			[]int{200, 200, 429}},
		{"behind a trusted proxy", keys.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			[]string{"10.0.0.1:1 2001:db8::1", "10.0.0.2:1 2001:db8::2", "10.0.0.3:1 2001:db8::3"},
			[]int{200, 200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newStore(t)
			h := mustNew(t, Config{Limiter: store, Policies: []Policy{
				{Name: "per-ip", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}, Key: ByIP(&tt.c)},
			}}).Handler(okHandler)
			for i, remote := range tt.remotes {
				peer, xff, _ := strings.Cut(remote, " ")
				var w *httptest.ResponseRecorder
				if xff != "" {
					w = do(h, "GET", "/", peer, "X-Forwarded-For", xff)
				} else {
					w = do(h, "GET", "/", peer)
				}
				if w.Code != tt.want[i] {
					t.Errorf("request %d from %s: status %d, want %d", i, remote, w.Code, tt.want[i])
				}
			}
		})
	}
}

// TestByIPReadsTheChosenHeader: behind a trusted proxy, ByIP reads the one header
// ClientIP.Header names (X-Forwarded-For, X-Real-IP, Forwarded) and ignores the others:
// four requests claiming four addresses in the chosen header are four clients, and in
// any other header one client (the proxy).
func TestByIPReadsTheChosenHeader(t *testing.T) {
	value := map[string]func(i int) string{
		keys.HeaderXForwardedFor: func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) },
		keys.HeaderXRealIP:       func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) },
		keys.HeaderForwarded:     func(i int) string { return fmt.Sprintf("for=203.0.113.%d;proto=https", i+1) },
	}
	for chosen := range value {
		for sent, v := range value {
			t.Run(chosen+"/"+sent, func(t *testing.T) {
				store, _ := newStore(t)
				c := keys.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: chosen}
				h := mustNew(t, Config{Limiter: store, Policies: []Policy{
					{Name: "per-ip", Limit: sluice.PerHour(2), Key: ByIP(&c)},
				}}).Handler(okHandler)
				allowed := 0
				for i := range 4 {
					if do(h, "GET", "/", "10.0.0.1:1234", sent, v(i)).Code == http.StatusOK {
						allowed++
					}
				}
				want := 2
				if sent == chosen {
					want = 4
				}
				if allowed != want {
					t.Errorf("%d of 4 allowed, want %d", allowed, want)
				}
			})
		}
	}
}
