package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/stack"
)

// A clock that stands still, so that the output is the same on every run.
var now = time.Date(2030, 1, 1, 0, 0, 20, 0, time.UTC)

func newServer() *server.Server {
	cfg, err := config.Parse(
		config.File{Name: "policies.yaml", Data: []byte(`
policies:
  - name: per-ip
    key: ip
    algorithm: fixed_window
    rate: 2
    period: minute
`)},
		config.File{Name: "edge.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`)})
	if err != nil {
		panic(err)
	}
	// The production stack (decision log, metrics, deny cache, store), as `sluice serve`
	// builds it; in memory, since the configuration names no Redis. A service closes it
	// after Serve returns.
	st, err := stack.Open(cfg, stack.Options{Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	s, err := server.New(server.Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg, Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	return s
}

// The JSON API: a policy and the identity it limits.
func Example_check() {
	h := newServer().Handler()
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check",
			strings.NewReader(`{"policy":"per-ip","key":"203.0.113.7"}`)))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "per-ip";r=1;t=40 Retry-After: ""
	// 200 RateLimit: "per-ip";r=0;t=40 Retry-After: ""
	// 429 RateLimit: "per-ip";r=0;t=40 Retry-After: "40"
}

// Envoy's rate limit service, called directly (RegisterGRPC serves it over gRPC).
func ExampleServer_ShouldRateLimit() {
	s := newServer()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit, st.LimitRemaining, st.DurationUntilReset.AsDuration())
	}
	// Output:
	// OK 2 MINUTE 1 40s
	// OK 2 MINUTE 0 40s
	// OVER_LIMIT 2 MINUTE 0 40s
}
