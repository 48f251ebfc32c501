package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/stack"
)

const (
	testAdminToken = "admin-token-for-tests-0123456789"
	testAPIKey     = "sk_live_raw_api_key_never_logged"
)

// reply is one HTTP answer, read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) decode(t *testing.T) CheckResponse {
	t.Helper()
	var cr CheckResponse
	if err := json.Unmarshal([]byte(r.body), &cr); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return cr
}

func do(t *testing.T, method, url, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// rateLimitFields parses RateLimit back with a structured-field parser and returns each
// item's r and t by name.
func rateLimitFields(t *testing.T, h http.Header) map[string][2]int64 {
	t.Helper()
	if _, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy")); err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", h.Get("RateLimit-Policy"), err)
	}
	l, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", h.Get("RateLimit"), err)
	}
	out := map[string][2]int64{}
	for _, m := range l {
		it := m.(httpsfv.Item)
		r, _ := it.Params.Get("r")
		tt, _ := it.Params.Get("t")
		out[it.Value.(string)] = [2]int64{r.(int64), tt.(int64)}
	}
	return out
}

type httpStep struct {
	name    string
	method  string // default POST
	path    string
	body    string
	header  []string
	status  int
	check   func(t *testing.T, r reply)
	allowed *bool
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

func limits(t *testing.T, r reply) []LimitStatus { t.Helper(); return r.decode(t).Limits }

func TestHTTPAPI(t *testing.T) {
	t.Setenv("SERVER_TEST_ADMIN_TOKEN", testAdminToken)
	t.Setenv("SERVER_TEST_API_KEY_SECRET", "0123456789abcdef0123456789abcdef")
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, loadConfig(t, "policies.yaml", "edge.yaml"), Options{})
			remaining := func(want ...int64) func(t *testing.T, r reply) {
				return func(t *testing.T, rp reply) {
					t.Helper()
					ls := limits(t, rp)
					if len(ls) != len(want) {
						t.Fatalf("%d limits, want %d: %s", len(ls), len(want), rp.body)
					}
					for i, w := range want {
						if ls[i].Remaining != w {
							t.Fatalf("limit %d (%s) remaining %d, want %d: %s", i, ls[i].Name, ls[i].Remaining, w, rp.body)
						}
					}
				}
			}
			auth := []string{"Authorization", "Bearer " + testAdminToken}
			steps := []httpStep{
				{name: "per-ip 1", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 200, allowed: yes,
					check: func(t *testing.T, rp reply) {
						remaining(2)(t, rp)
						ls := limits(t, rp)[0]
						want := LimitStatus{Name: "per-ip", Status: "limited", Source: "policy", Algorithm: "fixed_window",
							Rate: 3, Period: "1m0s", Remaining: 2, ResetAfterMs: 40000, DecidedBy: "store"}
						if ls != want {
							t.Fatalf("limit %+v\nwant  %+v", ls, want)
						}
						if got := rateLimitFields(t, rp.header)["per-ip"]; got != [2]int64{2, 40} {
							t.Fatalf("RateLimit r, t = %v, want [2 40]", got)
						}
						if rp.header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` {
							t.Fatalf("RateLimit-Policy %q", rp.header.Get("RateLimit-Policy"))
						}
					}},
				{name: "per-ip 2", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 200, allowed: yes, check: remaining(1)},
				{name: "per-ip cost 0 peeks", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7","cost":0}`, status: 200, allowed: yes, check: remaining(1)},
				{name: "per-ip 3", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 200, allowed: yes, check: remaining(0)},
				{name: "per-ip 4 is denied", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 429, allowed: no,
					check: func(t *testing.T, rp reply) {
						cr := rp.decode(t)
						if cr.RetryAfterMs != 40000 || !cr.Limits[0].OverLimit || cr.Limits[0].RetryAfterMs != 40000 {
							t.Fatalf("denial %s", rp.body)
						}
						if rp.header.Get("Retry-After") != "40" {
							t.Fatalf("Retry-After %q, want 40", rp.header.Get("Retry-After"))
						}
					}},
				{name: "per-ip 5: the repeat of a denial is answered by the deny cache", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 429, allowed: no,
					check: func(t *testing.T, rp reply) {
						cr := rp.decode(t)
						if l := cr.Limits[0]; cr.RetryAfterMs != 40000 || !l.OverLimit || l.Remaining != 0 || l.RetryAfterMs != 40000 || l.DecidedBy != "cache" {
							t.Fatalf("repeated denial %s, want the same denial decided by the cache", rp.body)
						}
						if rp.header.Get("Retry-After") != "40" {
							t.Fatalf("Retry-After %q, want 40", rp.header.Get("Retry-After"))
						}
					}},
				{name: "GET peek spends nothing and answers 200", method: "GET", path: "/v1/peek?policy=per-ip&key=203.0.113.7", status: 200, allowed: no, check: remaining(0)},
				{name: "an IPv4-mapped address is the same client", path: "/v1/peek", body: `{"policy":"per-ip","key":"::ffff:203.0.113.7"}`, status: 200, allowed: no},
				{name: "IPv6 clients share their /64 (1)", path: "/v1/check", body: `{"policy":"per-ip","key":"2001:db8:1:2::1"}`, status: 200, check: remaining(2)},
				{name: "IPv6 clients share their /64 (2)", path: "/v1/check", body: `{"policy":"per-ip","key":"2001:db8:1:2:ffff::9"}`, status: 200, check: remaining(1)},
				{name: "another /64 is another client", path: "/v1/check", body: `{"policy":"per-ip","key":"2001:db8:1:3::1"}`, status: 200, check: remaining(2)},

				{name: "api key, default tier free (2/min)", path: "/v1/check", body: `{"policy":"api","key":"` + testAPIKey + `"}`, status: 200,
					check: func(t *testing.T, rp reply) {
						remaining(1)(t, rp)
						if s := limits(t, rp)[0].Source; s != "tier:free" {
							t.Fatalf("source %q", s)
						}
					}},
				{name: "pro tier has its own limit", path: "/v1/check", body: `{"policy":"api","key":"` + testAPIKey + `","tier":"pro"}`, status: 200, check: remaining(4)},
				{name: "a route adds its limit", path: "/v1/check", body: `{"policy":"api","key":"` + testAPIKey + `","tier":"pro","method":"POST","path":"/v1/items"}`, status: 200,
					check: func(t *testing.T, rp reply) {
						remaining(3, 0)(t, rp)
						if l := limits(t, rp)[1]; l.Name != "api POST /v1/items" || l.Source != "route" || l.Route != "POST /v1/items" {
							t.Fatalf("route limit %+v", l)
						}
					}},
				{name: "the route denies; the tier limit spends nothing", path: "/v1/check", body: `{"policy":"api","key":"` + testAPIKey + `","tier":"pro","method":"POST","path":"/v1/items"}`, status: 429, allowed: no,
					check: func(t *testing.T, rp reply) {
						ls := limits(t, rp)
						if ls[0].OverLimit || ls[0].Remaining != 3 || !ls[1].OverLimit {
							t.Fatalf("limits %+v", ls)
						}
					}},
				{name: "a GET is not on the route", path: "/v1/check", body: `{"policy":"api","key":"` + testAPIKey + `","tier":"pro","method":"GET","path":"/v1/items"}`, status: 200, check: remaining(2)},

				{name: "shadow policy: first", path: "/v1/check", body: `{"policy":"users","key":"u1"}`, status: 200, allowed: yes, check: remaining(0)},
				{name: "shadow policy: over the limit, still allowed", path: "/v1/check", body: `{"policy":"users","key":"u1"}`, status: 200, allowed: yes,
					check: func(t *testing.T, rp reply) {
						l := limits(t, rp)[0]
						if !l.OverLimit || !l.Shadow {
							t.Fatalf("shadow limit %+v", l)
						}
						if rp.header.Get("Retry-After") != "" {
							t.Fatal("Retry-After on an allowed request")
						}
					}},

				{name: "domain descriptors with costs", path: "/v1/check", body: `{"domain":"edge","cost":2,"descriptors":[
					{"entries":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"1"}]},
					{"entries":[{"key":"remote_address","value":"10.0.0.1"}]},
					{"entries":[{"key":"remote_address","value":"8.8.8.8"}],"cost":1}]}`, status: 200, allowed: yes,
					check: func(t *testing.T, rp reply) {
						ls := limits(t, rp)
						if ls[0].Remaining != 3 || ls[1].Status != "unlimited" || ls[2].Remaining != 2 {
							t.Fatalf("limits %s", rp.body)
						}
					}},
				{name: "domain peek by query", method: "GET", path: "/v1/peek?domain=edge&descriptor=message_type%3Dmarketing%2Cto_number%3D1", status: 200, check: remaining(3)},
				{name: "domain over the limit", path: "/v1/check", body: `{"domain":"edge","cost":4,"descriptors":[{"entries":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"1"}]}]}`, status: 429, allowed: no},
				{name: "domain limit override", path: "/v1/check", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"x","value":"y"}],"limit":{"requests_per_unit":1,"unit":"hour"}}]}`, status: 200, check: remaining(0)},
				// Envoy's RLS answers an unknown domain OK; the JSON API, asked about a
				// domain by name, says there is none.
				{name: "unknown domain is not found", path: "/v1/check", body: `{"domain":"nope","descriptors":[{"entries":[{"key":"x","value":"y"}]}]}`, status: 404,
					check: func(t *testing.T, rp reply) {
						if !strings.Contains(rp.body, `no domain named \"nope\" (the configuration's domains: `) {
							t.Fatalf("body %s", rp.body)
						}
					}},

				{name: "unknown policy", path: "/v1/check", body: `{"policy":"nope","key":"x"}`, status: 404},
				{name: "malformed JSON", path: "/v1/check", body: `{"policy":`, status: 400},
				{name: "unknown field", path: "/v1/check", body: `{"policy":"per-ip","key":"1.2.3.4","costs":1}`, status: 400},
				{name: "negative cost", path: "/v1/check", body: `{"policy":"per-ip","key":"1.2.3.4","cost":-1}`, status: 400},
				{name: "cost beyond the limit", path: "/v1/check", body: `{"policy":"per-ip","key":"1.2.3.4","cost":4}`, status: 400},
				{name: "not an IP", path: "/v1/check", body: `{"policy":"per-ip","key":"bob"}`, status: 400},
				{name: "no key", path: "/v1/check", body: `{"policy":"per-ip"}`, status: 400},
				{name: "policy and domain", path: "/v1/check", body: `{"policy":"per-ip","key":"1.2.3.4","domain":"edge"}`, status: 400},
				{name: "neither", path: "/v1/check", body: `{}`, status: 400},
				{name: "bad override unit", path: "/v1/check", body: `{"domain":"edge","descriptors":[{"entries":[{"key":"x","value":"y"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`, status: 400},
				{name: "GET check", method: "GET", path: "/v1/check", status: 405},

				{name: "reset without a token", path: "/v1/reset", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 401},
				{name: "reset with a wrong token", path: "/v1/reset", body: `{"policy":"per-ip","key":"203.0.113.7"}`, header: []string{"Authorization", "Bearer wrong"}, status: 401},
				{name: "reset with a token of another scheme", path: "/v1/reset", body: `{"policy":"per-ip","key":"203.0.113.7"}`, header: []string{"Authorization", "Basic " + testAdminToken}, status: 401},
				{name: "the limit is still exhausted", path: "/v1/peek", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 200, allowed: no},
				{name: "reset", path: "/v1/reset", body: `{"policy":"per-ip","key":"203.0.113.7"}`, header: auth, status: 200,
					check: func(t *testing.T, rp reply) {
						if strings.TrimSpace(rp.body) != `{"reset":["per-ip"]}` {
							t.Fatalf("reset answered %s", rp.body)
						}
					}},
				{name: "after the reset the limit is whole", path: "/v1/check", body: `{"policy":"per-ip","key":"203.0.113.7"}`, status: 200, check: remaining(2)},
				{name: "config dump needs the token", method: "GET", path: "/v1/config", status: 401},
				{name: "config dump", method: "GET", path: "/v1/config", header: auth, status: 200,
					check: func(t *testing.T, rp reply) {
						if !strings.Contains(rp.body, `"per-ip"`) || !strings.Contains(rp.body, `"edge"`) {
							t.Fatalf("dump %s", rp.body)
						}
					}},
				{name: "healthz", method: "GET", path: "/healthz", status: 200},
				{name: "readyz", method: "GET", path: "/readyz", status: 200},
				{name: "metrics", method: "GET", path: "/metrics", status: 200,
					check: func(t *testing.T, rp reply) {
						for _, s := range []string{
							`sluice_server_requests_total{api="check",code="ok"}`,
							`sluice_server_requests_total{api="check",code="over_limit"}`,
							`sluice_server_requests_total{api="check",code="invalid"}`,
							`sluice_server_requests_total{api="reset",code="ok"} 1`,
							`sluice_server_admin_denied_total 4`,
							`sluice_envoy_unknown_domain_total 1`,
						} {
							if !strings.Contains(rp.body, s) {
								t.Errorf("/metrics lacks %s", s)
							}
						}
					}},
			}
			var transcript bytes.Buffer
			for _, s := range steps {
				method := s.method
				if method == "" {
					method = "POST"
				}
				rp := do(t, method, r.base+s.path, s.body, s.header...)
				transcript.WriteString(rp.body)
				for k, v := range rp.header {
					transcript.WriteString(k + ": " + strings.Join(v, ",") + "\n")
				}
				if rp.status != s.status {
					t.Fatalf("%s: status %d, want %d: %s", s.name, rp.status, s.status, rp.body)
				}
				if s.allowed != nil {
					if got := rp.decode(t).Allowed; got != *s.allowed {
						t.Fatalf("%s: allowed %v, want %v: %s", s.name, got, *s.allowed, rp.body)
					}
				}
				if s.check != nil {
					s.check(t, rp)
				}
			}
			if strings.Contains(transcript.String(), testAPIKey) || strings.Contains(transcript.String(), testAdminToken) {
				t.Fatal("a raw API key or the admin token appears in a response")
			}
		})
	}
}

// TestAdminDisabledWithoutToken: with no token configured, admin endpoints refuse every
// request, even one presenting an empty bearer token.
func TestAdminDisabledWithoutToken(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	r, _ := newServer(t, stores[0], loadConfig(t, "edge.yaml"), Options{})
	for _, h := range [][]string{nil, {"Authorization", "Bearer "}, {"Authorization", "Bearer x"}} {
		if rp := do(t, "POST", r.base+"/v1/reset", `{"domain":"edge","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, h...); rp.status != 403 {
			t.Fatalf("reset with %v: status %d, want 403", h, rp.status)
		}
	}
}

// TestReadinessFollowsRedis: /readyz and the gRPC health service report the store's
// reachability, as the stack reports it (stack.Stack.Ready).
func TestReadinessFollowsRedis(t *testing.T) {
	cfg := loadConfig(t, "edge.yaml")
	srv, st := openRedisStack(t, cfg, nil, stack.Options{})
	s, err := New(Options{Limiter: st.Limiter(), Config: cfg, Ready: st.Ready})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := r.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: RateLimitServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	if rp := do(t, "GET", r.base+"/readyz", ""); rp.status != 200 {
		t.Fatalf("/readyz %d with Redis up", rp.status)
	}
	if h := health(); h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v with Redis up", h)
	}
	srv.Kill()
	if rp := do(t, "GET", r.base+"/readyz", ""); rp.status != 503 || !strings.Contains(rp.body, "store not reachable") {
		t.Fatalf("/readyz %d %q with Redis down", rp.status, rp.body)
	}
	poll.Until(t, 10*time.Second, "gRPC health NOT_SERVING after Redis died", func() bool {
		return health() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if rp := do(t, "GET", r.base+"/healthz", ""); rp.status != 200 {
		t.Fatalf("/healthz %d: liveness must not follow the store", rp.status)
	}
}
