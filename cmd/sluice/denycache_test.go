package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeDenyCache: on Redis, a client over its limit is answered from the deny cache
// (OVER_LIMIT with a shrinking duration_until_reset) without a script call; the metrics
// show it; an admin reset forgets the denial. --deny-cache-bytes 0 sends every request
// to Redis.
func TestServeDenyCache(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "s3cret")
	for _, tc := range []struct {
		name  string
		store string // a store block for the configuration, if any
		args  []string
		on    bool
	}{
		{name: "default", on: true},
		{name: "off by flag", args: []string{"--deny-cache-bytes", "0"}},
		{name: "off by configuration", store: "store:\n  deny_cache: off\n"},
		{name: "flag over configuration", store: "store:\n  deny_cache: off\n", args: []string{"--deny-cache-bytes", "1048576"}, on: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on := tc.on
			cfg := t.TempDir()
			files := map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      algorithm: gcra\n      unit: hour\n      requests_per_unit: 2\n"}
			if tc.store != "" {
				files["store.yaml"] = tc.store
			}
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(cfg, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			srv := redistest.Start(t)
			args := append([]string{"--redis", srv.URL(), "--config", cfg, "--deadline", "1s", "--log-level", "warn"}, tc.args...)
			base, grpcAddr, _ := started(t, args...)
			rls := rlsClient(t, grpcAddr)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", "u1")}}
			ask := func() *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			for i := range 2 {
				if resp := ask(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d: %v", i, resp)
				}
			}
			first := ask()
			if first.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("third request: %v", first)
			}
			calls, _ := srv.ScriptStats()
			prev := first.Statuses[0].DurationUntilReset.AsDuration()
			for i := range 20 {
				resp := ask()
				st := resp.Statuses[0]
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 2 {
					t.Fatalf("repeat %d: %v", i, resp)
				}
				if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > prev {
					t.Fatalf("repeat %d: duration_until_reset %v after %v", i, d, prev)
				}
				prev = st.DurationUntilReset.AsDuration()
			}
			var want int64
			if !on {
				want = 20
			}
			if got, _ := srv.ScriptStats(); got-calls != want {
				t.Errorf("Redis ran %d scripts for 20 repeated denials, want %d", got-calls, want)
			}
			metrics := httpGet(t, base+"/metrics")
			cached := `sluice_decisions_total{path="cache",policy="edge",result="denied"} 20`
			if strings.Contains(metrics, cached) != on {
				t.Errorf("/metrics with the cache on=%v lacks or has %s:\n%s", on, cached, grepLines(metrics, "sluice_decisions_total", "deny_cache"))
			}
			if strings.Contains(metrics, "sluice_deny_cache_entries 1") != on {
				t.Errorf("/metrics: sluice_deny_cache_entries:\n%s", grepLines(metrics, "deny_cache"))
			}

			rq, _ := http.NewRequest("POST", base+"/v1/reset", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`))
			rq.Header.Set("Authorization", "Bearer s3cret")
			rp, err := http.DefaultClient.Do(rq)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(rp.Body)
			rp.Body.Close()
			if rp.StatusCode != http.StatusOK {
				t.Fatalf("/v1/reset: %d %s", rp.StatusCode, body)
			}
			if resp := ask(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("after the reset: %v", resp)
			}
		})
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	rp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Body.Close()
	b, err := io.ReadAll(rp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestServeDenyCacheMemory: on the in-memory store too, a client hammering a key over its
// limit is answered from the deny cache, and the decision log writes the store's denial
// but samples its repeats instead of writing a line per request.
func TestServeDenyCacheMemory(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfg, []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      algorithm: gcra\n      unit: hour\n      requests_per_unit: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A max age no loaded machine outlasts while the 50 calls run: the cache must answer all.
	base, grpcAddr, log := started(t, "--config", cfg, "--log-level", "info", "--log-sampling", "0", "--deny-cache-max-age", "1h")
	rls := rlsClient(t, grpcAddr)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", "u1")}}
	for i := range 51 {
		resp, err := rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if want := i > 0; (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != want {
			t.Fatalf("request %d: %v", i, resp)
		}
	}
	metrics := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`sluice_decisions_total{path="store",policy="edge",result="denied"} 1`,
		`sluice_decisions_total{path="cache",policy="edge",result="denied"} 49`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "sluice_decisions_total"))
		}
	}
	if n := strings.Count(log.String(), `"msg":"rate limit decision"`); n != 1 {
		t.Errorf("%d decision log lines for 50 denials of one client, want 1 (the store's):\n%s", n, log.String())
	}
}
