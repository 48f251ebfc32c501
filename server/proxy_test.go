package server

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/stack"
)

// upstream is a test backend that records what reached it.
type upstream struct {
	*httptest.Server
	hits      atomic.Int64
	lastXFF   atomic.Value
	lastAPIKy atomic.Value
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.lastXFF.Store(r.Header.Get("X-Forwarded-For"))
		u.lastAPIKy.Store(r.Header.Get("X-API-Key"))
		w.Header().Set("X-Upstream", "yes")
		w.Write([]byte("hello from upstream " + r.Method + " " + r.URL.Path))
	}))
	t.Cleanup(u.Close)
	return u
}

// serveProxy serves p on a real loopback listener.
func serveProxy(t *testing.T, p http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: p}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

func TestProxy(t *testing.T) {
	t.Setenv("SERVER_TEST_API_KEY_SECRET", "0123456789abcdef0123456789abcdef")
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			c := clocktest.New(t0)
			up := newUpstream(t)
			target, _ := url.Parse(up.URL)
			cfg := loadConfig(t, "policies.yaml", "edge.yaml")
			st := k.open(t, cfg, c.Now, stack.Options{})
			p, err := NewProxy(ProxyOptions{Limiter: st.Limiter(), Upstream: target, Config: cfg, LegacyHeaders: true})
			if err != nil {
				t.Fatal(err)
			}
			base := serveProxy(t, p)

			// per-ip: 3 per minute (fixed window, 40 s left at t0) for 127.0.0.1.
			for i := int64(2); i >= 0; i-- {
				rp := do(t, "GET", base+"/things", "")
				if rp.status != 200 || rp.body != "hello from upstream GET /things" || rp.header.Get("X-Upstream") != "yes" {
					t.Fatalf("request %d: %d %q", 3-i, rp.status, rp.body)
				}
				if got := rateLimitFields(t, rp.header)["per-ip"]; got != [2]int64{i, 40} {
					t.Fatalf("request %d: RateLimit per-ip r, t = %v, want [%d 40]", 3-i, got, i)
				}
				if rp.header.Get("X-RateLimit-Remaining") != itoa(i) || rp.header.Get("X-RateLimit-Limit") != "3" {
					t.Fatalf("legacy headers %v", rp.header)
				}
			}
			if xff, _ := up.lastXFF.Load().(string); xff != "127.0.0.1" {
				t.Fatalf("upstream saw X-Forwarded-For %q, want 127.0.0.1", xff)
			}
			rp := do(t, "GET", base+"/things", "")
			if rp.status != 429 {
				t.Fatalf("4th request: %d %q", rp.status, rp.body)
			}
			if up.hits.Load() != 3 {
				t.Fatalf("upstream got %d requests, want 3: a denied request must not reach it", up.hits.Load())
			}
			if ct := rp.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("429 Content-Type %q", ct)
			}
			var prob httplimit.Problem
			if err := json.Unmarshal([]byte(rp.body), &prob); err != nil {
				t.Fatal(err)
			}
			if prob.Type != httplimit.ProblemQuotaExceeded || prob.Status != 429 || len(prob.ViolatedPolicies) != 1 || prob.ViolatedPolicies[0] != "per-ip" {
				t.Fatalf("429 body %+v", prob)
			}
			if rp.header.Get("Retry-After") != "40" {
				t.Fatalf("Retry-After %q, want 40", rp.header.Get("Retry-After"))
			}

			// A new window: the per-ip limit is whole again.
			c.Advance(40 * time.Second)
			// An API key adds the api policy (free tier, 2/min) and, on POST /v1/items,
			// its route limit (1/min) — decided atomically with per-ip.
			post := func() reply {
				return do(t, "POST", base+"/v1/items", "{}", "X-API-Key", testAPIKey)
			}
			rp = post()
			if rp.status != 200 {
				t.Fatalf("POST with API key: %d %q", rp.status, rp.body)
			}
			f := rateLimitFields(t, rp.header)
			if f["per-ip"][0] != 2 || f["api"][0] != 1 || f["api POST /v1/items"][0] != 0 {
				t.Fatalf("RateLimit fields %v", f)
			}
			if k, _ := up.lastAPIKy.Load().(string); k != testAPIKey {
				t.Fatal("the API key was not passed upstream")
			}
			rp = post()
			if rp.status != 429 || !strings.Contains(rp.body, `"api POST /v1/items"`) {
				t.Fatalf("second POST: %d %q", rp.status, rp.body)
			}
			// Denied by the route: per-ip and api spent nothing.
			f = rateLimitFields(t, rp.header)
			if f["per-ip"][0] != 2 || f["api"][0] != 1 {
				t.Fatalf("after a denial the other policies were spent: %v", f)
			}
			for _, v := range rp.header {
				for _, s := range v {
					if strings.Contains(s, testAPIKey) {
						t.Fatal("the raw API key appears in a response header")
					}
				}
			}
			// The JSON API and the proxy count the same: /v1/check sees the proxy's state.
			s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: p.opts.Config, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			r := serve(t, s)
			got := do(t, "POST", r.base+"/v1/peek", `{"policy":"per-ip","key":"127.0.0.1"}`).decode(t)
			if got.Limits[0].Remaining != 2 {
				t.Fatalf("/v1/peek sees remaining %d for the proxy's client, want 2", got.Limits[0].Remaining)
			}
		})
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestProxyReload: a reloaded configuration changes the proxy's limits; one the
// middleware cannot take keeps the previous policies.
func TestProxyReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write := func(rate int) {
		writeAtomically(t, path, "policies:\n  - name: per-ip\n    algorithm: fixed_window\n    key: ip\n    period: hour\n    rate: "+itoa(int64(rate))+"\n")
	}
	write(1)
	w, err := config.NewWatcher(path, config.WithDebounce(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	up := newUpstream(t)
	target, _ := url.Parse(up.URL)
	p, err := NewProxy(ProxyOptions{Limiter: memoryStack(t, w.Config()).Limiter(), Upstream: target, Watcher: w})
	if err != nil {
		t.Fatal(err)
	}
	base := serveProxy(t, p)
	if rp := do(t, "GET", base+"/", ""); rp.status != 200 {
		t.Fatalf("first: %d", rp.status)
	}
	if rp := do(t, "GET", base+"/", ""); rp.status != 429 {
		t.Fatalf("second under rate 1: %d", rp.status)
	}
	write(5)
	poll.Until(t, 10*time.Second, "the reloaded limit in effect", func() bool {
		rp := do(t, "GET", base+"/", "")
		if rp.status == 200 {
			if q := rp.header.Get("RateLimit-Policy"); q != `"per-ip";q=5;w=3600` {
				t.Fatalf("after reload RateLimit-Policy %q", q)
			}
			return true
		}
		return false
	})
	// Valid for config, refused by the proxy: two tier headers.
	writeAtomically(t, path, `policies:
  - {name: a, key: ip, rate: 9, period: hour, tier_header: X-A, tiers: {x: {rate: 1, period: hour}}}
  - {name: b, key: ip, rate: 9, period: hour, tier_header: X-B, tiers: {x: {rate: 1, period: hour}}}
`)
	poll.Until(t, 10*time.Second, "the second configuration loaded", func() bool { return w.Reloads() >= 2 })
	rp := do(t, "GET", base+"/", "")
	if q := rp.header.Get("RateLimit-Policy"); q != `"per-ip";q=5;w=3600` {
		t.Fatalf("a configuration the proxy refused took effect: RateLimit-Policy %q", q)
	}
}
