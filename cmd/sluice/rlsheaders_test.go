package main

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestServeRLSHeaders: `sluice serve` answers Envoy without headers by default, as the
// reference implementation does; the reference's own environment variables
// (LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_*_HEADER, SHADOW_MODE) and the flags turn on its
// three headers, with the names they give, and global shadow mode; --rls-ietf-headers
// turns on the IETF fields.
func TestServeRLSHeaders(t *testing.T) {
	cfg := writeConfig(t, "edge.yaml", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	for _, tc := range []struct {
		name    string
		env     []string // NAME, value
		args    []string
		allowed string // header names, in order
		denied  string
		overall rlsv3.RateLimitResponse_Code // of the denied request
	}{
		{name: "default", overall: rlsv3.RateLimitResponse_OVER_LIMIT},
		{name: "the reference's variables", env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_REMAINING_HEADER", "X-Left", "SHADOW_MODE", "true"},
			allowed: "RateLimit-Limit X-Left RateLimit-Reset", denied: "RateLimit-Limit X-Left RateLimit-Reset", overall: rlsv3.RateLimitResponse_OK},
		{name: "flags", args: []string{"--limit-response-headers", "--limit-limit-header", "X-Limit", "--limit-reset-header", "X-Reset", "--rls-ietf-headers"},
			allowed: "X-Limit RateLimit-Remaining X-Reset RateLimit-Policy RateLimit", denied: "X-Limit RateLimit-Remaining X-Reset RateLimit-Policy RateLimit Retry-After",
			overall: rlsv3.RateLimitResponse_OVER_LIMIT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1])
			}
			_, grpcAddr, _ := started(t, append([]string{"--config", cfg, "--log-level", "warn"}, tc.args...)...)
			rls := rlsClient(t, grpcAddr)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", tc.name)}}
			for i, want := range []string{tc.allowed, tc.denied} {
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, h := range resp.ResponseHeadersToAdd {
					names = append(names, h.Key)
				}
				if got := strings.Join(names, " "); got != want {
					t.Errorf("request %d: headers %q, want %q", i+1, got, want)
				}
				if i == 1 && (resp.OverallCode != tc.overall || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT) {
					t.Errorf("request 2: %v, descriptor %v; want %v, OVER_LIMIT", resp.OverallCode, resp.Statuses[0].Code, tc.overall)
				}
			}
		})
	}
}

// TestServeRLSHeaderNameRefused: a header name that is not an HTTP field name stops
// serve with an error naming it.
func TestServeRLSHeaderNameRefused(t *testing.T) {
	code, _, errOut := runCmd(t, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--limit-response-headers", "--limit-reset-header", "Rate Limit")
	if code == 0 || !strings.Contains(errOut, `"Rate Limit" is not a valid HTTP header name`) {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}
