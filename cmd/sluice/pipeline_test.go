package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// pipelineStores are the stores the all-or-nothing tests run the commands on: memory, one
// redis-server, and a 3-primary Redis Cluster, where the limits of one request live in
// different slots. Each returns the command-line flags that select it.
var pipelineStores = []struct {
	name  string
	flags func(t *testing.T) []string
}{
	{"memory", func(*testing.T) []string { return nil }},
	{"redis", func(t *testing.T) []string { return []string{"--redis", redistest.Start(t).URL()} }},
	{"cluster", func(t *testing.T) []string {
		c := redistest.StartCluster(t)
		addrs := c.Addrs()
		u := "redis://" + addrs[0]
		for i, a := range addrs[1:] {
			sep := "&"
			if i == 0 {
				sep = "?"
			}
			u += sep + "addr=" + a
		}
		return []string{"--redis", u}
	}},
}

// pipelineFlags are the flags every all-or-nothing test gives: a deadline a loaded
// two-core machine meets, and failing closed, so that a store failure could never pass
// for an allowed request.
var pipelineFlags = []string{"--deadline", "2s", "--failure-mode", "closed", "--log-level", "warn"}

func writeConfig(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxyDeniedSpendsNothing: through `sluice proxy`, policies wide (GCRA 100/h) and
// narrow (GCRA 2/h) on the client IP: after 2 allowed and 5 denied requests, wide has
// spent exactly 2 (r=98): the denied requests spent nothing of it.
func TestProxyDeniedSpendsNothing(t *testing.T) {
	for _, st := range pipelineStores {
		t.Run(st.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
			defer up.Close()
			cfg := writeConfig(t, "p.yaml", `policies:
  - {name: wide, key: ip, algorithm: gcra, rate: 100, period: hour}
  - {name: narrow, key: ip, algorithm: gcra, rate: 2, period: hour}
`)
			args := append([]string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg}, pipelineFlags...)
			atMidHour(t)
			base := "http://" + startedProxy(t, append(args, st.flags(t)...)...)
			var last http.Header
			for i, want := range []int{200, 200, 429, 429, 429, 429, 429} {
				rp, err := http.Get(base + "/x")
				if err != nil {
					t.Fatal(err)
				}
				rp.Body.Close()
				if rp.StatusCode != want {
					t.Fatalf("request %d: %d, want %d", i, rp.StatusCode, want)
				}
				last = rp.Header
			}
			if got, want := last.Get("RateLimit"), `"wide";r=98`; !strings.Contains(got, want) || !strings.Contains(got, `"narrow";r=0`) {
				t.Fatalf("RateLimit after 2 allowed and 5 denied: %q, want %s and \"narrow\";r=0", got, want)
			}
		})
	}
}

const pipelineDomain = `domain: pipeline
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: api_key
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 3}
`

func both(addr string) []*ratelimitv3.RateLimitDescriptor {
	return []*ratelimitv3.RateLimitDescriptor{
		descriptor("remote_address", addr),
		descriptor("api_key", "k1", "path", "/orders"),
	}
}

// atMidHour starts a test that counts in hour-long limits on a stopped clock in the
// middle of an hour, so that no window ends and no bucket refills during it. The RLS
// tests keep Envoy's default, fixed windows, since that is what they test: with GCRA
// descriptors the concurrent test on a Redis Cluster, whose two keys are in different
// slots, finds remote_address a unit short.
func atMidHour(t *testing.T) {
	t.Helper()
	atVirtualTime(t, clocktest.MidHour)
}

// TestServeGRPCDeniedSpendsNothing: over Envoy's RLS, a domain with remote_address 5/h and
// api_key+path 3/h: four calls carrying both answer OK, OK, OK, OVER_LIMIT, and then
// remote_address alone has 1 left (5 - 3 - this call): the OVER_LIMIT call spent nothing.
func TestServeGRPCDeniedSpendsNothing(t *testing.T) {
	for _, st := range pipelineStores {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "pipeline.yaml", fmt.Sprintf(pipelineDomain, 5))
			atMidHour(t)
			_, grpcAddr, _ := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			rls := rlsClient(t, grpcAddr)
			ctx := context.Background()
			for i, want := range []rlsv3.RateLimitResponse_Code{
				rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT,
			} {
				resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "pipeline", Descriptors: both("198.51.100.1")})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if resp.OverallCode != want {
					t.Fatalf("call %d: %v, want %v", i, resp, want)
				}
				if i == 3 && (resp.Statuses[0].LimitRemaining != 2 || resp.Statuses[1].LimitRemaining != 0) {
					t.Fatalf("the OVER_LIMIT call's statuses: %v; want remote_address 2 left (unspent) and api_key+path 0", resp.Statuses)
				}
			}
			resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "pipeline",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "198.51.100.1")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("remote_address alone: %v, want OK with 1 remaining", resp)
			}
		})
	}
}

// TestServeGRPCDeniedSpendsNothingConcurrently: 64 callers send 128 calls carrying both
// descriptors of one client at once: exactly 3 pass (api_key+path allows 3), and
// remote_address (100/h) has spent exactly those 3.
func TestServeGRPCDeniedSpendsNothingConcurrently(t *testing.T) {
	for _, st := range pipelineStores {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "pipeline.yaml", fmt.Sprintf(pipelineDomain, 100))
			atMidHour(t)
			// A deadline no call reaches even on a loaded machine: a call cut at its deadline
			// fails closed (OVER_LIMIT) after its spends reached Redis, which would leave
			// remote_address short of the exact figure below.
			flags := append(append([]string{"--config", cfg}, pipelineFlags...), "--deadline", "30s")
			_, grpcAddr, _ := started(t, append(flags, st.flags(t)...)...)
			rls := rlsClient(t, grpcAddr)
			ctx := context.Background()
			var ok, over atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 128)
			for range 64 {
				wg.Go(func() {
					for range 2 {
						resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "pipeline", Descriptors: both("198.51.100.2")})
						switch {
						case err != nil:
							errs <- err
						case resp.OverallCode == rlsv3.RateLimitResponse_OK:
							ok.Add(1)
						default:
							over.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if ok.Load() != 3 || over.Load() != 125 {
				t.Fatalf("%d OK and %d OVER_LIMIT of 128, want 3 and 125", ok.Load(), over.Load())
			}
			resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "pipeline",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "198.51.100.2")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Statuses[0].LimitRemaining != 96 {
				t.Fatalf("remote_address alone: %v, want 96 remaining (100 - 3 - this call)", resp)
			}
		})
	}
}

// TestServeJSONDeniedSpendsNothing: over the JSON API, a policy's tier limit (50/h) and one
// of its route limits (2/h): the third order is denied by the route, and the tier limit
// has spent exactly 2.
func TestServeJSONDeniedSpendsNothing(t *testing.T) {
	for _, st := range pipelineStores {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "sluice.yaml", `policies:
  - name: api
    algorithm: sliding_window
    key: ip
    tier_header: X-Plan
    default_tier: free
    tiers:
      free: {rate: 50, period: hour}
    routes:
      "POST /v1/orders": {rate: 2, period: hour}
`)
			atMidHour(t)
			base, _, _ := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			check := func(path, body string) (int, map[string]int64) {
				t.Helper()
				rp, err := http.Post(base+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer rp.Body.Close()
				var out struct {
					Limits []struct {
						Name      string `json:"name"`
						Remaining int64  `json:"remaining"`
					} `json:"limits"`
				}
				if err := json.NewDecoder(rp.Body).Decode(&out); err != nil {
					t.Fatal(err)
				}
				rem := map[string]int64{}
				for _, l := range out.Limits {
					rem[l.Name] = l.Remaining
				}
				return rp.StatusCode, rem
			}
			order := `{"policy":"api","key":"198.51.100.3","tier":"free","method":"POST","path":"/v1/orders"}`
			for i, want := range []int{200, 200, 429, 429} {
				code, rem := check("/v1/check", order)
				if code != want {
					t.Fatalf("order %d: %d, want %d", i, code, want)
				}
				if want == 429 && (rem["api"] != 48 || rem["api POST /v1/orders"] != 0) {
					t.Fatalf("denied order %d: remaining %v, want api 48 (unspent) and the route 0", i, rem)
				}
			}
			code, rem := check("/v1/peek", `{"policy":"api","key":"198.51.100.3","tier":"free"}`)
			if code != 200 || rem["api"] != 48 {
				t.Fatalf("peek: %d %v, want api 48", code, rem)
			}
		})
	}
}
