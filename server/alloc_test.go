//go:build !race

// The race detector allocates on synchronisation (and sync.Pool drops items under it), so
// allocation counts mean nothing there: the tests in this file are built only without it,
// and make test (which builds without it) runs them; make race leaves them out.

package server

import (
	"context"
	"testing"
	"unsafe"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// TestShouldRateLimitAllocations: on the production stack on memory, an allowed
// ShouldRateLimit of one descriptor allocates its answer (the response, its status, its
// headers and their text, in one block) and its counter key, nothing else, with each
// choice of headers.
func TestShouldRateLimitAllocations(t *testing.T) {
	cfg, err := config.Parse(config.File{Name: "bench.yaml", Data: []byte(servicebenchConfig)})
	if err != nil {
		t.Fatal(err)
	}
	st := memoryStack(t, cfg)
	for _, tc := range []struct {
		name    string
		h       RLSHeaders
		headers int
	}{{"none", RLSHeaders{}, 0}, {"IETF", RLSHeaders{IETF: true}, 2}, {"reference", RLSHeaders{Reference: true}, 3}} {
		s, err := New(Options{Limiter: st.Limiter(), Config: cfg, FailureMode: sluice.FailOpen, RLSHeaders: tc.h})
		if err != nil {
			t.Fatal(err)
		}
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitDescriptor{desc("client", "c1")}}
		var resp *rlsv3.RateLimitResponse
		n := testing.AllocsPerRun(200, func() {
			if resp, err = s.ShouldRateLimit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		})
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.ResponseHeadersToAdd) != tc.headers {
			t.Fatalf("%s: answer %v, want OK with %d headers", tc.name, resp, tc.headers)
		}
		if n > 2 {
			t.Fatalf("%s: %v allocations per ShouldRateLimit, want at most 2 (the answer and the counter key)", tc.name, n)
		}
	}
}

// TestShouldRateLimitDeniedAllocations: a denied ShouldRateLimit of one descriptor with
// the IETF fields allocates no more than an allowed one: its Retry-After header, and the
// value's text, are in the answer's block.
func TestShouldRateLimitDeniedAllocations(t *testing.T) {
	st := memoryStack(t, loadConfig(t, "edge.yaml"))
	s, err := New(Options{Limiter: st.Limiter(), Config: loadConfig(t, "edge.yaml"), FailureMode: sluice.FailOpen, RLSHeaders: RLSHeaders{IETF: true}})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitDescriptor{desc("message_type", "marketing", "to_number", "1")}}
	var resp *rlsv3.RateLimitResponse
	n := testing.AllocsPerRun(200, func() {
		if resp, err = s.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	})
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.ResponseHeadersToAdd) != 3 ||
		resp.ResponseHeadersToAdd[2].Key != "Retry-After" || resp.ResponseHeadersToAdd[2].Value == "" {
		t.Fatalf("answer %v, want OVER_LIMIT with RateLimit-Policy, RateLimit and Retry-After", resp)
	}
	if n > 2 {
		t.Fatalf("%v allocations per denied ShouldRateLimit, want at most 2 (the answer and the counter key)", n)
	}
}

// TestAnswerSize: the answer block fills the 768-byte size class; a field added to it
// would move every answer to the next class (896).
func TestAnswerSize(t *testing.T) {
	if n := unsafe.Sizeof(answer{}); n > 768 {
		t.Fatalf("answer is %d bytes, more than the 768 of its size class", n)
	}
}
