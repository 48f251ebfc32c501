package server

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/stack"
)

// TestDurationUntilResetWholeSeconds: with the clock 700 ms past t0, duration_until_reset
// is what the reference computes, the unit's length less the Unix second modulo it, in
// whole seconds: for an allowed descriptor, one over its limit, one of a denied request
// whose counter holds nothing, a requests_per_unit 0 rule and a limit override with a
// unit_multiplier. Default options: no headers.
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	mult := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: second, UnitMultiplier: wrapperspb.UInt32(30)}
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want *resp
	}{
		{"allowed", edgeReq(desc("remote_address", "1.1.1.1")), &resp{OverallCode: ok, Statuses: []*status_{st(ok, cur("", 3, minute), 2, 40*time.Second)}}},
		{"allowed", edgeReq(desc("remote_address", "1.1.1.1")), &resp{OverallCode: ok, Statuses: []*status_{st(ok, cur("", 3, minute), 1, 40*time.Second)}}},
		{"allowed", edgeReq(desc("remote_address", "1.1.1.1")), &resp{OverallCode: ok, Statuses: []*status_{st(ok, cur("", 3, minute), 0, 40*time.Second)}}},
		{"over, beside an empty counter", edgeReq(desc("remote_address", "1.1.1.1"), desc("message_type", "marketing", "to_number", "9")), &resp{
			OverallCode: over, Statuses: []*status_{st(over, cur("", 3, minute), 0, 40*time.Second), st(ok, cur("", 5, day), 5, 24*time.Hour-20*time.Second)}}},
		{"requests_per_unit 0", edgeReq(desc("remote_address", "50.0.0.5")), &resp{OverallCode: over, Statuses: []*status_{st(over, cur("", 0, hour), 0, time.Hour-20*time.Second)}}},
		{"unit_multiplier 30", edgeReq(withOverride(desc("remote_address", "4.4.4.4"), 2, typev3.RateLimitUnit_SECOND, 30)), &resp{
			OverallCode: ok, Statuses: []*status_{{Code: ok, CurrentLimit: mult, LimitRemaining: 1, DurationUntilReset: durationpb.New(10 * time.Second)}}}},
	}
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, clock := newServer(t, k, loadConfig(t, "edge.yaml"), Options{})
			clock.Set(t0.Add(700 * time.Millisecond))
			for _, s := range steps {
				got, err := r.rls.ShouldRateLimit(context.Background(), s.req)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if !proto.Equal(got, s.want) {
					t.Fatalf("%s:\ngot  %s\nwant %s", s.name, prototext.Format(got), prototext.Format(s.want))
				}
			}
		})
	}
}

// TestReferenceHeaders: with RLSHeaders.Reference the answer carries the reference's
// three headers for the descriptor it would pick: the last one OVER_LIMIT, else the first
// with the least limit_remaining among those with a current_limit (shadow ones included,
// unlimited and unmatched ones not); none when no descriptor has a limit. Global shadow
// mode keeps them.
func TestReferenceHeaders(t *testing.T) {
	three := func(l, r, s string) []string {
		return []string{"RateLimit-Limit", l, "RateLimit-Remaining", r, "RateLimit-Reset", s}
	}
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want []string // header names and values
	}{
		{"one descriptor", edgeReq(desc("remote_address", "1.1.1.1")), three("3", "2", "40")},
		{"the least remaining", edgeReq(desc("message_type", "marketing", "to_number", "1"), desc("remote_address", "1.1.1.1"), desc("remote_address", "10.0.0.1")), three("3", "1", "40")},
		{"ties go to the first", edgeReq(withHits(desc("message_type", "marketing", "to_number", "2"), 3), desc("remote_address", "1.1.1.2")), three("5", "2", "86380")},
		{"unlimited and unmatched only", edgeReq(desc("remote_address", "10.0.0.1"), desc("nothing", "x")), nil},
		{"the last over the limit", edgeReq(desc("remote_address", "50.0.0.5"), desc("shadow", "s"), desc("remote_address", "1.1.1.4")), three("0", "0", "3580")},
		{"a shadow descriptor at 0 is the least", edgeReq(desc("shadow", "s"), desc("remote_address", "1.1.1.5")), three("1", "0", "40")},
		{"an unknown domain", &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, nil},
	}
	run := func(t *testing.T, opts Options, names map[string]string, overall rlsv3.RateLimitResponse_Code) {
		r, clock := newServer(t, stores[0], loadConfig(t, "edge.yaml"), opts)
		clock.Set(t0.Add(300 * time.Millisecond))
		for _, s := range steps {
			got, err := r.rls.ShouldRateLimit(context.Background(), s.req)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			var h []string
			for _, kv := range got.ResponseHeadersToAdd {
				h = append(h, kv.Key, kv.Value)
			}
			var want []string
			for i, v := range s.want {
				if n, ok := names[v]; ok && i%2 == 0 {
					v = n
				}
				want = append(want, v)
			}
			if strings.Join(h, "|") != strings.Join(want, "|") {
				t.Errorf("%s: headers %q, want %q", s.name, h, want)
			}
			if s.name == "the last over the limit" && got.OverallCode != overall {
				t.Errorf("%s: %v, want %v", s.name, got.OverallCode, overall)
			}
		}
	}
	t.Run("default names", func(t *testing.T) {
		run(t, Options{RLSHeaders: RLSHeaders{Reference: true}}, nil, over)
	})
	names := map[string]string{"RateLimit-Limit": "X-RL-Limit", "RateLimit-Remaining": "X-RL-Remaining", "RateLimit-Reset": "X-RL-Reset"}
	t.Run("names of the operator's and global shadow mode", func(t *testing.T) {
		run(t, Options{ShadowMode: true, RLSHeaders: RLSHeaders{Reference: true, Limit: "X-RL-Limit", Remaining: "X-RL-Remaining", Reset: "X-RL-Reset"}}, names, ok)
	})
}

// TestRLSHeadersNames: a header name that is not an HTTP field name is refused by New.
func TestRLSHeadersNames(t *testing.T) {
	st := openStack(t, loadConfig(t, "edge.yaml"), stack.Options{Clock: time.Now})
	for _, h := range []RLSHeaders{{Limit: "Rate Limit"}, {Remaining: "X:Y"}, {Reset: "é"}} {
		if _, err := New(Options{Limiter: st.Limiter(), RLSHeaders: h}); err == nil || !strings.Contains(err.Error(), "not a valid HTTP header name") {
			t.Errorf("%+v: %v, want an error naming the header", h, err)
		}
	}
}
