package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/stack"
)

// desc builds a descriptor from key, value pairs, as Envoy's rate limit actions do.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *ratelimitv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

type (
	ratelimitDescriptor = ratelimitv3.RateLimitDescriptor
	resp                = rlsv3.RateLimitResponse
	status_             = rlsv3.RateLimitResponse_DescriptorStatus
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func cur(name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit}
}

func st(code rlsv3.RateLimitResponse_Code, limit *rlsv3.RateLimitResponse_RateLimit, remaining uint32, reset time.Duration) *status_ {
	s := &status_{Code: code, CurrentLimit: limit, LimitRemaining: remaining}
	if limit != nil {
		s.DurationUntilReset = durationpb.New(reset)
	}
	return s
}

var (
	noLimit   = &status_{Code: ok}
	unlimited = &status_{Code: ok, LimitRemaining: math.MaxUint32}
)

func hdrs(kv ...string) []*corev3.HeaderValue {
	var h []*corev3.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, &corev3.HeaderValue{Key: kv[i], Value: kv[i+1]})
	}
	return h
}

// envoyStep is one ShouldRateLimit call and its complete expected answer.
type envoyStep struct {
	name    string
	req     *rlsv3.RateLimitRequest
	want    *resp
	wantErr codes.Code
}

func edgeReq(descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs}
}

const (
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
)

// envoySteps run in order against one server whose clock stands at t0 (20 s into the
// minute, hour and day). ietf is the server's Options.RLSHeaders.IETF: without it the
// answers carry no headers. shadowHeaders is its Options.ShadowHeaders: without it a
// shadow limit stays out of the RateLimit headers.
func envoySteps(ietf, shadowHeaders bool) []envoyStep {
	steps := ietfSteps(shadowHeaders)
	if !ietf {
		for _, s := range steps {
			if s.want != nil {
				s.want.ResponseHeadersToAdd = nil
			}
		}
	}
	return steps
}

// ietfSteps are envoySteps with the IETF fields.
func ietfSteps(shadowHeaders bool) []envoyStep {
	shadowHdrs := hdrs("RateLimit-Policy", `"edge.shadow";q=1;w=60`, "RateLimit", `"edge.shadow";r=0;t=40`)
	if !shadowHeaders {
		shadowHdrs = nil
	}
	ra := cur("", 3, minute)
	mk := cur("", 5, day)
	ten := 40 * time.Second // to the end of t0's minute
	dayLeft := 24*time.Hour - 20*time.Second
	return []envoyStep{
		{"first of 3 per minute", edgeReq(desc("remote_address", "1.1.1.1")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, ra, 2, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=2;t=40`),
		}, 0},
		{"second", edgeReq(desc("remote_address", "1.1.1.1")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, ra, 1, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=1;t=40`),
		}, 0},
		{"third", edgeReq(desc("remote_address", "1.1.1.1")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, ra, 0, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=0;t=40`),
		}, 0},
		{"fourth is over the limit until the window ends", edgeReq(desc("remote_address", "1.1.1.1")), &resp{
			OverallCode: over, Statuses: []*status_{st(over, ra, 0, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=0;t=40`, "Retry-After", "40"),
		}, 0},
		{"another address has its own counter", edgeReq(desc("remote_address", "1.1.1.2")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, ra, 2, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=2;t=40`),
		}, 0},
		{"requests_per_unit 0 blocks", edgeReq(desc("remote_address", "50.0.0.5")), &resp{
			OverallCode: over, Statuses: []*status_{st(over, cur("", 0, hour), 0, time.Hour-20*time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address_50.0.0.5";q=0;w=3600`, "RateLimit", `"edge.remote_address_50.0.0.5";r=0;t=3580`, "Retry-After", "3580"),
		}, 0},
		{"wildcard unlimited never touches the store", edgeReq(desc("remote_address", "10.1.2.3")), &resp{
			OverallCode: ok, Statuses: []*status_{unlimited},
		}, 0},
		{"nested entries with request hits_addend 2", &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "555")}}, &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, mk, 3, dayLeft)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.message_type_marketing.to_number";q=5;w=86400`, "RateLimit", `"edge.message_type_marketing.to_number";r=3;t=86380`),
		}, 0},
		{"descriptor hits_addend 3 overrides the request's 1", &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("message_type", "marketing", "to_number", "555"), 3)}}, &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, mk, 0, dayLeft)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.message_type_marketing.to_number";q=5;w=86400`, "RateLimit", `"edge.message_type_marketing.to_number";r=0;t=86380`),
		}, 0},
		{"a nested entry alone matches nothing", edgeReq(desc("to_number", "555")), &resp{
			OverallCode: ok, Statuses: []*status_{noLimit},
		}, 0},
		{"several descriptors: one exhausted denies, the others spend nothing",
			edgeReq(desc("remote_address", "1.1.1.1"), desc("message_type", "marketing", "to_number", "777"), desc("unknown", "x")), &resp{
				OverallCode: over, Statuses: []*status_{st(over, ra, 0, ten), st(ok, mk, 5, dayLeft), noLimit},
				ResponseHeadersToAdd: hdrs(
					"RateLimit-Policy", `"edge.remote_address";q=3;w=60, "edge.message_type_marketing.to_number";q=5;w=86400`,
					"RateLimit", `"edge.remote_address";r=0;t=40, "edge.message_type_marketing.to_number";r=5;t=0`,
					"Retry-After", "40"),
			}, 0},
		{"the number the denied request named is untouched", edgeReq(desc("message_type", "marketing", "to_number", "777")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, mk, 4, dayLeft)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.message_type_marketing.to_number";q=5;w=86400`, "RateLimit", `"edge.message_type_marketing.to_number";r=4;t=86380`),
		}, 0},
		{"limit override replaces the configured limit", edgeReq(withOverride(desc("remote_address", "4.4.4.4"), 1, typev3.RateLimitUnit_SECOND, 0)), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("", 1, second), 0, time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address_4.4.4.4";q=1;w=1`, "RateLimit", `"edge.remote_address_4.4.4.4";r=0;t=1`),
		}, 0},
		{"override exhausted", edgeReq(withOverride(desc("remote_address", "4.4.4.4"), 1, typev3.RateLimitUnit_SECOND, 0)), &resp{
			OverallCode: over, Statuses: []*status_{st(over, cur("", 1, second), 0, time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address_4.4.4.4";q=1;w=1`, "RateLimit", `"edge.remote_address_4.4.4.4";r=0;t=1`, "Retry-After", "1"),
		}, 0},
		{"override with unit_multiplier: 2 per 30 s", edgeReq(withOverride(desc("remote_address", "4.4.4.4"), 2, typev3.RateLimitUnit_SECOND, 30)), &resp{
			OverallCode: ok, Statuses: []*status_{{Code: ok, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: second, UnitMultiplier: wrapperspb.UInt32(30)},
				LimitRemaining: 1, DurationUntilReset: durationpb.New(10 * time.Second)}},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.remote_address_4.4.4.4";q=2;w=30`, "RateLimit", `"edge.remote_address_4.4.4.4";r=1;t=10`),
		}, 0},
		{"gcra extension, burst 2", edgeReq(desc("api", "k1")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("", 600, minute), 1, time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.api";q=600;w=60`, "RateLimit", `"edge.api";r=1;t=1`),
		}, 0},
		{"gcra burst spent", edgeReq(desc("api", "k1")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("", 600, minute), 0, time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.api";q=600;w=60`, "RateLimit", `"edge.api";r=0;t=1`),
		}, 0},
		{"gcra over: duration_until_reset is the time until a retry passes, in whole seconds", edgeReq(desc("api", "k1")), &resp{
			OverallCode: over, Statuses: []*status_{st(over, cur("", 600, minute), 0, time.Second)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"edge.api";q=600;w=60`, "RateLimit", `"edge.api";r=0;t=1`, "Retry-After", "1"),
		}, 0},
		{"shadow mode: first", edgeReq(desc("shadow", "s")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("", 1, minute), 0, ten)},
			ResponseHeadersToAdd: shadowHdrs,
		}, 0},
		{"shadow mode: over the limit but OK", edgeReq(desc("shadow", "s")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("", 1, minute), 0, ten)},
			ResponseHeadersToAdd: shadowHdrs,
		}, 0},
		{"replaces: premium replaces the tenant default", edgeReq(desc("tenant", "acme"), desc("premium", "yes")), &resp{
			OverallCode: ok, Statuses: []*status_{noLimit, st(ok, cur("premium", 10, minute), 9, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"premium";q=10;w=60`, "RateLimit", `"premium";r=9;t=40`),
		}, 0},
		{"without premium the tenant default applies", edgeReq(desc("tenant", "acme")), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("tenant_default", 2, minute), 1, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"tenant_default";q=2;w=60`, "RateLimit", `"tenant_default";r=1;t=40`),
		}, 0},
		{"is_negative_hits only looks", edgeReq(func() *ratelimitv3.RateLimitDescriptor {
			d := withHits(desc("tenant", "acme"), 1)
			d.IsNegativeHits = true
			return d
		}()), &resp{
			OverallCode: ok, Statuses: []*status_{st(ok, cur("tenant_default", 2, minute), 1, ten)},
			ResponseHeadersToAdd: hdrs("RateLimit-Policy", `"tenant_default";q=2;w=60`, "RateLimit", `"tenant_default";r=1;t=40`),
		}, 0},
		{"unknown domain limits nothing", &rlsv3.RateLimitRequest{Domain: "nope",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "1.1.1.1"), desc("a", "b")}}, &resp{
			OverallCode: ok, Statuses: []*status_{noLimit, noLimit},
		}, 0},
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, nil, codes.InvalidArgument},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, nil, codes.InvalidArgument},
		{"a descriptor without entries matches no rule, as in the reference", edgeReq(&ratelimitv3.RateLimitDescriptor{}), &resp{
			OverallCode: ok, Statuses: []*status_{noLimit},
		}, 0},
		{"override with an unknown unit", edgeReq(withOverride(desc("remote_address", "9.9.9.9"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), nil, codes.InvalidArgument},
	}
}

func TestShouldRateLimit(t *testing.T) {
	type run struct {
		k                   storeKind
		name                string
		ietf, shadowHeaders bool
	}
	runs := []run{{stores[0], "memory IETF headers", true, false}, {stores[0], "memory IETF and shadow headers", true, true}}
	for _, k := range stores {
		runs = append(runs, run{k, k.name, false, false})
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			r, _ := newServer(t, run.k, loadConfig(t, "edge.yaml"), Options{ShadowHeaders: run.shadowHeaders, RLSHeaders: RLSHeaders{IETF: run.ietf}})
			ctx := context.Background()
			for _, step := range envoySteps(run.ietf, run.shadowHeaders) {
				got, err := r.rls.ShouldRateLimit(ctx, step.req)
				if step.wantErr != 0 {
					if status.Code(err) != step.wantErr {
						t.Fatalf("%s: error %v, want code %v", step.name, err, step.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				if !proto.Equal(got, step.want) {
					t.Fatalf("%s:\ngot  %s\nwant %s", step.name, prototext.Format(got), prototext.Format(step.want))
				}
				for _, h := range got.ResponseHeadersToAdd {
					switch h.Key {
					case "RateLimit-Policy", "RateLimit":
						if _, err := httpsfv.UnmarshalList([]string{h.Value}); err != nil {
							t.Errorf("%s: %s is not a structured-field list: %v", step.name, h.Key, err)
						}
					}
				}
			}
		})
	}
}

// TestShouldRateLimitGlobalShadowMode: with Options.ShadowMode every answer is OK, while
// the descriptors still report being over the limit.
func TestShouldRateLimitGlobalShadowMode(t *testing.T) {
	r, _ := newServer(t, stores[0], loadConfig(t, "edge.yaml"), Options{ShadowMode: true})
	req := edgeReq(desc("remote_address", "50.0.0.5"))
	got, err := r.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.OverallCode != ok || got.Statuses[0].Code != over {
		t.Fatalf("overall %v, descriptor %v; want OK overall and OVER_LIMIT for the descriptor", got.OverallCode, got.Statuses[0].Code)
	}
}

// TestShouldRateLimitReusesNothingStale: the slices one request works with are reused by
// the next; a request after larger ones, with an override, a multiplier, hits and a
// blocked rule, gets exactly its own answer.
func TestShouldRateLimitReusesNothingStale(t *testing.T) {
	big := edgeReq(
		withOverride(desc("remote_address", "1.1.1.1", "x", "y"), 7, typev3.RateLimitUnit_HOUR, 3),
		withHits(desc("message_type", "marketing", "to_number", "1"), 2),
		desc("shadow", "s"),
		desc("remote_address", "50.0.0.5"),
	)
	small := edgeReq(desc("remote_address", "2.2.2.2"))
	want := &resp{
		OverallCode: ok, Statuses: []*status_{st(ok, cur("", 3, minute), 2, 40*time.Second)},
		ResponseHeadersToAdd: hdrs("RateLimit-Limit", "3", "RateLimit-Remaining", "2", "RateLimit-Reset", "40",
			"RateLimit-Policy", `"edge.remote_address";q=3;w=60`, "RateLimit", `"edge.remote_address";r=2;t=40`),
	}
	r, _ := newServer(t, stores[0], loadConfig(t, "edge.yaml"), Options{RLSHeaders: RLSHeaders{Reference: true, IETF: true}})
	ctx := context.Background()
	for range 3 {
		if _, err := r.srv.ShouldRateLimit(ctx, big); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.srv.ShouldRateLimit(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("after larger requests:\n%v\nwant\n%v", prototext.Format(got), prototext.Format(want))
	}
}

// TestShouldRateLimitFailsClosed: with its Redis gone and the failure mode closed, every
// limited descriptor is OVER_LIMIT, within the deadline, and the answer carries the headers
// of a denial (RateLimit-Policy, RateLimit with nothing remaining, Retry-After) for Envoy to
// pass on; an unlimited descriptor is still OK. The mode comes from the --failure-mode
// flag (Options.FailureMode; the stack's own default left open, so that only the
// requests' Failure can close it) or from the configuration's store.failure_mode, and
// reaches failover in the stack in each sluice.Request.
func TestShouldRateLimitFailsClosed(t *testing.T) {
	edge, err := os.ReadFile(filepath.Join("testdata", "edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store string // the configuration's store block
		flag  sluice.FailureMode
	}{
		{"flag", "", sluice.FailClosed},
		{"configuration", "store: {failure_mode: closed}\n", sluice.FailInherit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := []config.File{{Name: "edge.yaml", Data: edge}}
			if tc.store != "" {
				files = append(files, config.File{Name: "store.yaml", Data: []byte(tc.store)})
			}
			cfg, err := config.Parse(files...)
			if err != nil {
				t.Fatal(err)
			}
			srv, st := openRedisStack(t, cfg, nil, stack.Options{Deadline: 20 * time.Millisecond})
			s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg, FailureMode: tc.flag, RLSHeaders: RLSHeaders{IETF: true}})
			if err != nil {
				t.Fatal(err)
			}
			r := serve(t, s)
			srv.Kill()
			start := time.Now()
			got, err := r.rls.ShouldRateLimit(context.Background(), edgeReq(desc("remote_address", "1.2.3.4"), desc("remote_address", "10.1.2.3")))
			if err != nil {
				t.Fatal(err)
			}
			// A real fault (a killed Redis): the answer comes at the 20ms deadline, not
			// after the client's reconnects; 1s of slack is scheduling on busy cores.
			if el := time.Since(start); el > time.Second {
				t.Errorf("answered after %v with a 20ms deadline", el)
			}
			if got.OverallCode != over || got.Statuses[0].Code != over || got.Statuses[1].Code != ok {
				t.Fatalf("overall %v, descriptors %v and %v; want OVER_LIMIT, OVER_LIMIT, OK:\n%s",
					got.OverallCode, got.Statuses[0].Code, got.Statuses[1].Code, prototext.Format(got))
			}
			h := map[string]string{}
			for _, kv := range got.ResponseHeadersToAdd {
				h[kv.Key] = kv.Value
			}
			if h["RateLimit-Policy"] == "" || !strings.Contains(h["RateLimit"], ";r=0;") || h["Retry-After"] != "1" {
				t.Errorf("headers of the fail-closed answer: %v; want RateLimit-Policy, RateLimit with r=0 and Retry-After 1", h)
			}
		})
	}
}

// countingLimiter counts the calls, and the requests in them, that reach the limiter it
// wraps.
type countingLimiter struct {
	sluice.Limiter
	calls, reqs atomic.Int64
}

func (c *countingLimiter) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	c.calls.Add(1)
	c.reqs.Add(int64(len(reqs)))
	return c.Limiter.Decide(ctx, reqs, ds)
}

// TestUnlimitedNeverTouchesTheStore: descriptors matching an unlimited rule (and a rule
// with requests_per_unit 0, which blocks without counting) are answered without a store
// call, over gRPC and HTTP; a limited descriptor makes exactly one.
func TestUnlimitedNeverTouchesTheStore(t *testing.T) {
	cfg := loadConfig(t, "edge.yaml")
	st := memoryStack(t, cfg)
	store := &countingLimiter{Limiter: st.Limiter()}
	s, err := New(Options{Limiter: store, Ready: st.Ready, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		got, err := r.rls.ShouldRateLimit(ctx, edgeReq(desc("remote_address", fmt.Sprint("10.0.0.", i)), desc("remote_address", "50.0.0.5")))
		if err != nil {
			t.Fatal(err)
		}
		if got.Statuses[0].Code != ok || got.Statuses[1].Code != over {
			t.Fatalf("unlimited and blocked: %s", prototext.Format(got))
		}
	}
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.9.9.9"}]}]}`
	resp, err := http.Post(r.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP check of an unlimited descriptor: %s", resp.Status)
	}
	if n := store.calls.Load(); n != 0 {
		t.Fatalf("%d store calls for unlimited and blocked descriptors, want 0", n)
	}
	if _, err := r.rls.ShouldRateLimit(ctx, edgeReq(desc("remote_address", "1.2.3.4"))); err != nil {
		t.Fatal(err)
	}
	if n, reqs := store.calls.Load(), store.reqs.Load(); n != 1 || reqs != 1 {
		t.Fatalf("%d store calls of %d requests for one limited descriptor, want 1 of 1", n, reqs)
	}
}

// opaqueLimiter is a decorator the server knows nothing about. Before the contract
// decided whole requests, a wrapper like it hid the store's AllowMulti and the server
// decided descriptors one by one, spending the first naming of a denied request; now
// every Limiter decides a request all or nothing, wrapped or not.
type opaqueLimiter struct{ sluice.Limiter }

// TestShouldRateLimitRepeatedDescriptor: Envoy sends a descriptor twice when two of a
// route's actions produce it, and the reference counts it once per naming. A store takes
// a key and limit once per Decide, so the server asks for the sum of the costs, and
// reports each naming as spent after the ones before it; a sum the limit can never allow
// denies the request without spending. (Before, the repeated key made AllowMulti fail and
// the request was answered Unavailable.) It holds through any decorator.
func TestShouldRateLimitRepeatedDescriptor(t *testing.T) {
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	twice := func(ip string, hits uint64) *rlsv3.RateLimitRequest {
		return edgeReq(withHits(desc("remote_address", ip), hits), withHits(desc("remote_address", ip), hits))
	}
	type step struct {
		name string
		req  *rlsv3.RateLimitRequest
		// want is the answer of a limiter that decides a request's descriptors at once,
		// which every sluice.Limiter now does.
		want []want
	}
	steps := []step{
		{"twice, 3 per minute", twice("1.1.1.1", 1), []want{{ok, 2}, {ok, 1}}},
		{"twice with one left: the first naming alone would pass", twice("1.1.1.1", 1), []want{{ok, 1}, {over, 1}}},
		{"once: the denied request spent nothing (atomically)", edgeReq(desc("remote_address", "1.1.1.1")), []want{{ok, 0}}},
		{"twice 2 hits: 4 can never pass 3 per minute", twice("2.2.2.2", 2), []want{{ok, 3}, {over, 3}}},
		{"nothing was spent", edgeReq(desc("remote_address", "2.2.2.2")), []want{{ok, 2}}},
	}
	kinds := append([]storeKind{}, stores...)
	wrapped := stores[0]
	wrapped.name, wrapped.wrap = "wrapped", func(l sluice.Limiter) sluice.Limiter { return opaqueLimiter{l} }
	kinds = append(kinds, wrapped)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, loadConfig(t, "edge.yaml"), Options{})
			for _, s := range steps {
				got, err := r.rls.ShouldRateLimit(context.Background(), s.req)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				w := s.want
				overall := ok
				var g []want
				for i, st := range got.Statuses {
					g = append(g, want{st.Code, st.LimitRemaining})
					if w[i].code == over {
						overall = over
					}
				}
				if fmt.Sprint(g) != fmt.Sprint(w) || got.OverallCode != overall {
					t.Fatalf("%s: %v %v, want %v %v", s.name, got.OverallCode, g, overall, w)
				}
			}
		})
	}
}

// TestShouldRateLimitQuotaMode: a quota_mode descriptor over its limit is answered OK with
// its current_limit and limit_remaining and no duration_until_reset, as the reference
// answers it, and does not deny the request; with shadow_mode as well, shadow mode's
// answer (duration_until_reset kept) wins, as there.
func TestShouldRateLimitQuotaMode(t *testing.T) {
	r, _ := newServer(t, stores[0], loadConfig(t, "quota.yaml"), Options{})
	ctx := context.Background()
	req := &rlsv3.RateLimitRequest{Domain: "quota", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("plan", "p1"), desc("both", "b1")}}
	lim := cur("", 1, minute)
	for i, want := range [][]*status_{
		{st(ok, lim, 0, 40*time.Second), st(ok, lim, 0, 40*time.Second)},
		{{Code: ok, CurrentLimit: lim}, st(ok, lim, 0, 40*time.Second)},
	} {
		got, err := r.rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		w := &resp{OverallCode: ok, Statuses: want}
		got.ResponseHeadersToAdd = nil
		if !proto.Equal(got, w) {
			t.Fatalf("request %d:\ngot  %s\nwant %s", i+1, prototext.Format(got), prototext.Format(w))
		}
	}
}
