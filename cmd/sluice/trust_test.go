package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// trustIdentity: 127.0.0.1 is the trusted proxy; a client that connects from 127.0.0.2
// is not.
const trustIdentity = "identity: {trusted_proxies: [127.0.0.1/32], api_key_secret_env: TRUST_TEST_SECRET}\npolicies:\n"

// trustPolicies are one policy per header that could select a limit, each run in a
// proxy of its own.
var trustPolicies = map[string]string{
	"ip":   "  - {name: by-ip, key: ip, algorithm: gcra, rate: 2, period: hour}\n",
	"user": "  - {name: by-user, key: {type: user, header: X-User-ID}, algorithm: gcra, rate: 5, period: hour}\n",
	"tier": "  - {name: by-tier, key: ip, algorithm: gcra, tier_header: X-Plan, default_tier: free,\n" +
		"     tiers: {free: {rate: 2, period: hour}, pro: {rate: 10, period: hour}}}\n",
	"cost": "  - {name: by-cost, key: ip, algorithm: token_bucket, rate: 10, period: hour, settle: {ttl: 5m}}\n",
	"key":  "  - {name: by-key, key: {type: api_key, header: X-API-Key}, algorithm: gcra, rate: 2, period: hour}\n",
}

// peer is an HTTP client whose connections come from the loopback address from.
func peer(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}}
}

// admitted sends n GETs of path with the headers that hdr gives for the i-th, and
// returns how many were answered 200.
func admitted(t *testing.T, c *http.Client, url string, n int, hdr func(i int) map[string]string) int {
	t.Helper()
	ok := 0
	for i := range n {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr(i) {
			req.Header.Set(k, v)
		}
		rp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, rp.Body)
		rp.Body.Close()
		switch rp.StatusCode {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("%s request %d: %d", url, i, rp.StatusCode)
		}
	}
	return ok
}

// TestProxyTrust: every header that selects an identity, a tier or a cost estimate is
// believed from a trusted proxy and ignored from any other peer, through the proxy on
// memory and on Redis; an API key, a credential, is believed from anyone (the
// criticality header: TestProxyOverload). Before the one trust rule, an untrusted client rotating
// X-User-ID was never limited and could spend another user's quota, and one sending
// X-Cost-Estimate: 0 was never charged.
func TestProxyTrust(t *testing.T) {
	t.Setenv("TRUST_TEST_SECRET", "0123456789abcdef0123456789abcdef")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.URL.Query().Get("cost"); c != "" {
			w.Header().Set("X-Cost", c)
		}
	}))
	defer up.Close()
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var redisURL string
			if store == "redis" {
				redisURL = redistest.Start(t).URL()
			}
			proxy := func(policy string) string {
				cfg := filepath.Join(t.TempDir(), "trust.yaml")
				if err := os.WriteFile(cfg, []byte(trustIdentity+trustPolicies[policy]), 0o644); err != nil {
					t.Fatal(err)
				}
				args := []string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg}
				if redisURL != "" {
					// A deadline a loaded machine meets: a decision failed open would
					// count as a header believed.
					args = append(args, "--redis", redisURL, "--deadline", "2s", "--failure-mode", "closed")
				}
				return "http://" + startedProxy(t, args...)
			}
			trusted, stranger := peer("127.0.0.1"), peer("127.0.0.2")
			none := func(int) map[string]string { return nil }
			proxyIP, proxyUser, proxyTier, proxyCost, proxyKey := proxy("ip"), proxy("user"), proxy("tier"), proxy("cost"), proxy("key")

			// The client address (X-Forwarded-For).
			rotateIP := func(i int) map[string]string {
				return map[string]string{"X-Forwarded-For": fmt.Sprint("198.51.100.", i+1)}
			}
			if n := admitted(t, stranger, proxyIP+"/a", 10, rotateIP); n != 2 {
				t.Errorf("X-Forwarded-For from a stranger: %d of 10 admitted, want 2 (its own address)", n)
			}
			if n := admitted(t, trusted, proxyIP+"/a", 10, rotateIP); n != 10 {
				t.Errorf("X-Forwarded-For from the trusted proxy: %d of 10 admitted, want 10 (10 clients)", n)
			}

			// The identity (X-User-ID): a stranger rotating it is limited by its address,
			// and one claiming a victim's ID does not spend the victim's quota.
			if n := admitted(t, stranger, proxyUser+"/a", 30, func(i int) map[string]string {
				return map[string]string{"X-User-ID": fmt.Sprint("user-", i)}
			}); n != 5 {
				t.Errorf("rotating X-User-ID from a stranger: %d of 30 admitted, want 5", n)
			}
			victim := func(int) map[string]string { return map[string]string{"X-User-ID": "victim"} }
			if n := admitted(t, stranger, proxyUser+"/b", 10, victim); n != 0 {
				t.Errorf("X-User-ID: victim from a stranger: %d admitted, want 0 (its address's quota is spent)", n)
			}
			if n := admitted(t, trusted, proxyUser+"/b", 10, victim); n != 5 {
				t.Errorf("the victim through the trusted proxy: %d of 10 admitted, want its whole 5", n)
			}
			if n := admitted(t, trusted, proxyUser+"/c", 10, func(i int) map[string]string {
				return map[string]string{"X-User-ID": fmt.Sprint("user-", i)}
			}); n != 10 {
				t.Errorf("10 users through the trusted proxy: %d admitted, want 10", n)
			}

			// The tier (X-Plan).
			pro := func(int) map[string]string { return map[string]string{"X-Plan": "pro"} }
			if n := admitted(t, stranger, proxyTier+"/a", 12, pro); n != 2 {
				t.Errorf("X-Plan: pro from a stranger: %d of 12 admitted, want free's 2", n)
			}
			if n := admitted(t, trusted, proxyTier+"/a", 12, pro); n != 10 {
				t.Errorf("X-Plan: pro from the trusted proxy: %d of 12 admitted, want pro's 10", n)
			}

			// The cost estimate (X-Cost-Estimate): a stranger's 0 is the default estimate
			// of 1, and the upstream's actual cost is charged.
			zero := func(int) map[string]string { return map[string]string{"X-Cost-Estimate": "0"} }
			if n := admitted(t, stranger, proxyCost+"/a?cost=1", 30, zero); n != 10 {
				t.Errorf("X-Cost-Estimate: 0 from a stranger, X-Cost: 1: %d of 30 admitted, want 10", n)
			}
			if n := admitted(t, stranger, proxyCost+"/b", 1, none); n != 0 {
				t.Errorf("an ordinary request after the stranger's 10: admitted, want its quota spent")
			}
			six := func(int) map[string]string { return map[string]string{"X-Cost-Estimate": "6"} }
			if n := admitted(t, trusted, proxyCost+"/a", 2, six); n != 1 {
				t.Errorf("X-Cost-Estimate: 6 from the trusted proxy, standing: %d of 2 admitted, want 1 (6 + 6 > 10)", n)
			}
			if n := admitted(t, trusted, proxyCost+"/b?cost=0", 4, zero); n != 4 {
				t.Errorf("X-Cost-Estimate: 0 from the trusted proxy, settled at 0: %d of 4 admitted, want 4", n)
			}

			// An API key is a credential: believed from anyone, each key its own quota.
			if n := admitted(t, stranger, proxyKey+"/a", 6, func(i int) map[string]string {
				return map[string]string{"X-API-Key": fmt.Sprint("key-", i/3)}
			}); n != 4 {
				t.Errorf("two API keys from a stranger, 3 requests each: %d admitted, want 2 + 2", n)
			}
		})
	}
}
