package server

import (
	"context"
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
)

// Regression tests of the issue "a denied request spends its other limits in the shipped
// binary": the library decided a request of several limits all or nothing, but the stack
// `sluice serve` ran (observe -> failover -> store) hid the store's AllowMulti behind its
// wrappers, so the server fell back to deciding the limits one by one and spent every
// limit that passed before the one that denied. These run the server on the stack
// stack.Open builds, on memory and on a real redis-server.

// layeredDomain is an Envoy domain whose requests carry two limits: 5 per minute per
// client address, and 3 per minute per API key and path.
const layeredDomain = `
domain: layered
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api_key
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 3}
`

// layeredPolicy is a sluice policy with a tier limit (pro: 5 per minute) and a route
// limit (POST /v1/items: 3 per minute).
const layeredPolicy = `
policies:
  - name: api
    key: {type: api_key, header: X-API-Key}
    tier_header: X-Plan
    default_tier: free
    tiers:
      free: {rate: 2, period: minute}
      pro: {rate: 5, period: minute}
    routes:
      "POST /v1/items": {rate: 3, period: minute}
`

func parseInline(t *testing.T, name, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(config.File{Name: name, Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestShouldRateLimitDeniedSpendsNothing: four ShouldRateLimit calls carrying both
// descriptors are OK, OK, OK, OVER_LIMIT (the API key's 3 per minute); the OVER_LIMIT
// call spends nothing of the address's 5 per minute, so a call with the address alone
// then has 1 left (5 - 3 - 1), not 0.
func TestShouldRateLimitDeniedSpendsNothing(t *testing.T) {
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	both := &rlsv3.RateLimitRequest{Domain: "layered", Descriptors: []*ratelimitDescriptor{
		desc("remote_address", "192.0.2.1"), desc("api_key", "k1", "path", "/v1/items")}}
	alone := &rlsv3.RateLimitRequest{Domain: "layered", Descriptors: []*ratelimitDescriptor{
		desc("remote_address", "192.0.2.1")}}
	steps := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		overall rlsv3.RateLimitResponse_Code
		want    []want
	}{
		{"both 1", both, ok, []want{{ok, 4}, {ok, 2}}},
		{"both 2", both, ok, []want{{ok, 3}, {ok, 1}}},
		{"both 3", both, ok, []want{{ok, 2}, {ok, 0}}},
		{"both 4: the API key's limit denies; the address's alone would pass", both, over, []want{{ok, 2}, {over, 0}}},
		{"the address alone: the denied call spent nothing of it", alone, ok, []want{{ok, 1}}},
		{"both again: denied, spending nothing", both, over, []want{{ok, 1}, {over, 0}}},
		{"the address alone: its last unit", alone, ok, []want{{ok, 0}}},
		{"the address alone: exhausted", alone, over, []want{{over, 0}}},
	}
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, parseInline(t, "layered.yaml", layeredDomain), Options{})
			for _, s := range steps {
				got, err := r.rls.ShouldRateLimit(context.Background(), s.req)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				var g []want
				for _, st := range got.Statuses {
					g = append(g, want{st.Code, st.LimitRemaining})
				}
				if got.OverallCode != s.overall || fmt.Sprint(g) != fmt.Sprint(s.want) {
					t.Fatalf("%s: %v %v, want %v %v", s.name, got.OverallCode, g, s.overall, s.want)
				}
			}
		})
	}
}

// TestCheckDeniedSpendsNothing: the same through the JSON API, with one policy's tier
// limit and route limit: after the route limit denies, the tier limit's remaining shows
// that the denied request spent nothing of it.
func TestCheckDeniedSpendsNothing(t *testing.T) {
	const onRoute = `{"policy":"api","key":"` + testAPIKey + `","tier":"pro","method":"POST","path":"/v1/items"}`
	const tierOnly = `{"policy":"api","key":"` + testAPIKey + `","tier":"pro"}`
	type want struct {
		over      bool
		remaining int64
	}
	steps := []struct {
		name   string
		body   string
		status int
		want   []want
	}{
		{"route 1", onRoute, 200, []want{{false, 4}, {false, 2}}},
		{"route 2", onRoute, 200, []want{{false, 3}, {false, 1}}},
		{"route 3", onRoute, 200, []want{{false, 2}, {false, 0}}},
		{"route 4: the route limit denies; the tier limit alone would pass", onRoute, 429, []want{{false, 2}, {true, 0}}},
		{"the tier limit alone: the denied request spent nothing of it", tierOnly, 200, []want{{false, 1}}},
		{"route 5: denied again, spending nothing", onRoute, 429, []want{{false, 1}, {true, 0}}},
		{"the tier limit alone: its last unit", tierOnly, 200, []want{{false, 0}}},
		{"the tier limit alone: exhausted", tierOnly, 429, []want{{true, 0}}},
	}
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, parseInline(t, "policies.yaml", layeredPolicy), Options{})
			for _, s := range steps {
				rp := do(t, "POST", r.base+"/v1/check", s.body)
				if rp.status != s.status {
					t.Fatalf("%s: status %d, want %d: %s", s.name, rp.status, s.status, rp.body)
				}
				cr := rp.decode(t)
				if cr.Allowed != (s.status == 200) {
					t.Fatalf("%s: allowed %v: %s", s.name, cr.Allowed, rp.body)
				}
				var g []want
				for _, l := range cr.Limits {
					g = append(g, want{l.OverLimit, l.Remaining})
				}
				if fmt.Sprint(g) != fmt.Sprint(s.want) {
					t.Fatalf("%s: limits %v, want %v: %s", s.name, g, s.want, rp.body)
				}
				if cr.Limits[0].Source != "tier:pro" {
					t.Fatalf("%s: the first limit is %q, want the pro tier's: %s", s.name, cr.Limits[0].Source, rp.body)
				}
			}
		})
	}
}
