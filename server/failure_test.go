package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/stack"
)

// failureConfig has policies and a domain whose failure modes come from every rule:
// a policy's own, the store default, the flag.
const failureConfig = `
store: {failure_mode: open}
policies:
  - {name: strict, key: ip, rate: 1, period: second, failure_mode: closed, routes: {"POST /x": {rate: 1, period: second}}}
  - {name: lenient, key: ip, rate: 1, period: second}
  - {name: shared, key: ip, rate: 1, period: second, failure_mode: local, local_share: 0.25}
  - {name: open, key: ip, rate: 1, period: second, failure_mode: open}
`

const failureDomain = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`

func parseFailureConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse(config.File{Name: "p.yaml", Data: []byte(failureConfig)}, config.File{Name: "d.yaml", Data: []byte(failureDomain)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// recordingLimiter records every request that reaches the limiter it wraps.
type recordingLimiter struct {
	sluice.Limiter
	mu   sync.Mutex
	seen []sluice.Request
}

func (l *recordingLimiter) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	l.mu.Lock()
	l.seen = append(l.seen, reqs...)
	l.mu.Unlock()
	return l.Limiter.Decide(ctx, reqs, ds)
}

// failures returns the Failure of each request recorded since the last call.
func (l *recordingLimiter) failures() []sluice.Failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sluice.Failure
	for _, r := range l.seen {
		out = append(out, r.Failure)
	}
	l.seen = nil
	return out
}

// all reports whether fs has n elements, each want.
func all(fs []sluice.Failure, n int, want sluice.Failure) bool {
	if len(fs) != n {
		return false
	}
	for _, f := range fs {
		if f != want {
			return false
		}
	}
	return true
}

// TestPolicyFailure: each limit's failure mode travels in its request (sluice.Request's
// Failure), resolved from the policy or domain it belongs to: the policy's own mode and
// share, else the flag, else the store default, else open. For the proxy, PoliciesFor sets each
// httplimit.Policy's Failure (a route limit's is its policy's); for the Server, its
// requests carry it. (These replace PolicyFallback, which found the mode again from the
// policy named in the store key; a domain's keys name no policy, and now need not.)
func TestPolicyFailure(t *testing.T) {
	cfg := parseFailureConfig(t)
	h, err := keys.NewHasher([]byte("0123456789abcdef0123456789abcdef"), keys.Hex)
	if err != nil {
		t.Fatal(err)
	}
	// Every field is resolved (config.Config.Failure): a share nobody set is the whole limit.
	closed, open := sluice.Failure{Mode: sluice.FailClosed, Share: 1}, sluice.Failure{Mode: sluice.FailOpen, Share: 1}
	for _, tc := range []struct {
		name   string
		def    sluice.FailureMode
		policy string // the proxy's policy: a policy or a route limit ("" for a domain)
		body   string // the /v1/check request
		n      int    // the limits it decides
		want   sluice.Failure
	}{
		{"policy mode", sluice.FailInherit, "strict", `{"policy":"strict","key":"192.0.2.1"}`, 1, closed},
		{"route limit of the policy", sluice.FailInherit, RouteLimitName("strict", "POST /x"), `{"policy":"strict","key":"192.0.2.1","method":"POST","path":"/x"}`, 2, closed},
		{"store default", sluice.FailInherit, "lenient", `{"policy":"lenient","key":"192.0.2.1"}`, 1, open},
		{"flag over the store default", sluice.FailClosed, "lenient", `{"policy":"lenient","key":"192.0.2.1"}`, 1, closed},
		{"a policy's own mode equal to the store's keeps it against the flag", sluice.FailClosed, "open", `{"policy":"open","key":"192.0.2.1"}`, 1, open},
		{"local with its own share", sluice.FailOpen, "shared", `{"policy":"shared","key":"192.0.2.1"}`, 1, sluice.Failure{Mode: sluice.FailLocal, Share: 0.25}},
		{"a domain takes the store default", sluice.FailInherit, "", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 1, open},
		{"a domain takes the flag", sluice.FailClosed, "", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 1, closed},
	} {
		// The proxy's policies.
		if tc.policy != "" {
			policies, _, err := PoliciesFor(cfg, h, tc.def)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range policies {
				if p.Name == tc.policy {
					found = true
					if p.Failure != tc.want {
						t.Errorf("%s: proxy policy %q fails %+v, want %+v", tc.name, p.Name, p.Failure, tc.want)
					}
				}
			}
			if !found {
				t.Errorf("%s: PoliciesFor made no policy %q", tc.name, tc.policy)
			}
		}
		// The Server's requests, on the JSON API and (for the domain) Envoy's.
		rec := &recordingLimiter{Limiter: memoryStack(t, cfg).Limiter()}
		s, err := New(Options{Limiter: rec, Config: cfg, FailureMode: tc.def})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(tc.body)))
		if w.Code != 200 {
			t.Fatalf("%s: /v1/check %d %s", tc.name, w.Code, w.Body)
		}
		if got := rec.failures(); !all(got, tc.n, tc.want) {
			t.Errorf("%s: the server's requests fail %+v, want %d of %+v", tc.name, got, tc.n, tc.want)
		}
		if tc.policy == "" {
			if _, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
				Descriptors: []*ratelimitDescriptor{desc("k", "w")}}); err != nil {
				t.Fatal(err)
			}
			if got := rec.failures(); !all(got, 1, tc.want) {
				t.Errorf("%s: ShouldRateLimit's requests fail %+v, want 1 of %+v", tc.name, got, tc.want)
			}
		}
	}
}

// TestFailureModesThroughTheStack: with Redis gone, each policy is decided by its own
// failure mode in the shipped stack (failover reads it from the request): strict fails
// closed (503 with Retry-After), lenient takes the store default (open: allowed, decided
// by "open"), shared decides in-process under its share (decided by "local", a quarter of
// its limit); an Envoy domain takes the store default too.
func TestFailureModesThroughTheStack(t *testing.T) {
	cfg, err := config.Parse(config.File{Name: "p.yaml", Data: []byte(`
store: {failure_mode: open}
policies:
  - {name: strict, key: ip, rate: 4, period: hour, failure_mode: closed}
  - {name: lenient, key: ip, rate: 4, period: hour}
  - {name: shared, key: ip, rate: 4, period: hour, failure_mode: local, local_share: 0.25}
`)}, config.File{Name: "d.yaml", Data: []byte(failureDomain)})
	if err != nil {
		t.Fatal(err)
	}
	srv, st := openRedisStack(t, cfg, nil, stack.Options{Deadline: 200 * time.Millisecond})
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)
	if rp := do(t, "POST", r.base+"/v1/check", `{"policy":"lenient","key":"192.0.2.1"}`); rp.status != 200 || limits(t, rp)[0].DecidedBy != "store" {
		t.Fatalf("with Redis up: %d %s", rp.status, rp.body)
	}
	srv.Kill()
	check := func(policy string) reply {
		t.Helper()
		return do(t, "POST", r.base+"/v1/check", `{"policy":"`+policy+`","key":"192.0.2.1"}`)
	}
	if rp := check("strict"); rp.status != 503 || rp.header.Get("Retry-After") == "" {
		t.Errorf("strict (closed) with Redis down: %d %q %s, want 503 with Retry-After", rp.status, rp.header.Get("Retry-After"), rp.body)
	}
	for range 3 {
		if rp := check("lenient"); rp.status != 200 || limits(t, rp)[0].DecidedBy != "open" {
			t.Errorf("lenient (store default open) with Redis down: %d %s", rp.status, rp.body)
		}
	}
	rp := check("shared")
	if rp.status != 200 {
		t.Fatalf("shared (local) with Redis down: %d %s", rp.status, rp.body)
	}
	if l := limits(t, rp)[0]; l.DecidedBy != "local" || l.Rate != 1 {
		t.Errorf("shared with Redis down: %+v, want decided by local under a quarter of 4 per hour", l)
	}
	if rp := check("shared"); rp.status != 429 || limits(t, rp)[0].DecidedBy != "local" {
		t.Errorf("shared, second request with Redis down: %d %s, want 429 from the local share", rp.status, rp.body)
	}
	got, err := r.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitDescriptor{desc("k", "v")}})
	if err != nil || got.OverallCode != ok || got.Statuses[0].CurrentLimit == nil {
		t.Errorf("domain under the store default (open) with Redis down: %v, %v; want OK", got, err)
	}
}
