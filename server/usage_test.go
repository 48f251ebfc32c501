package server

import (
	"encoding/json"
	"net/url"
	"testing"
)

func getUsage(t *testing.T, base string, q url.Values) UsageResponse {
	t.Helper()
	rp := do(t, "GET", base+"/v1/usage?"+q.Encode(), "")
	if rp.status != 200 {
		t.Fatalf("usage: %d %s", rp.status, rp.body)
	}
	var u UsageResponse
	if err := json.Unmarshal([]byte(rp.body), &u); err != nil {
		t.Fatalf("usage %q: %v", rp.body, err)
	}
	return u
}

// TestUsageSpendsNothing: usage, check, usage shows exactly one unit spent on every limit
// that applied (a tier and a route, with their sources), and usage twice changes nothing;
// the same for an Envoy descriptor with several limits. On memory and Redis.
func TestUsageSpendsNothing(t *testing.T) {
	t.Setenv("SERVER_TEST_ADMIN_TOKEN", testAdminToken)
	t.Setenv("SERVER_TEST_API_KEY_SECRET", "0123456789abcdef0123456789abcdef")
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			cfg := loadConfig(t, "policies.yaml")
			r, _ := newServer(t, k, cfg, Options{})
			q := url.Values{"policy": {"api"}, "key": {testAPIKey}, "tier": {"pro"}, "method": {"POST"}, "path": {"/v1/items"}}
			before := getUsage(t, r.base, q)
			again := getUsage(t, r.base, q)
			if len(before.Limits) != 2 || before.Limits[0].Source != "tier:pro" || before.Limits[1].Source != "route" {
				t.Fatalf("usage %+v", before)
			}
			for i := range before.Limits {
				if before.Limits[i] != again.Limits[i] || before.Limits[i].Used != 0 || before.Limits[i].Remaining != before.Limits[i].Rate {
					t.Fatalf("usage spent: %+v then %+v", before.Limits[i], again.Limits[i])
				}
			}
			if rp := do(t, "POST", r.base+"/v1/check", `{"policy":"api","key":"`+testAPIKey+`","tier":"pro","method":"POST","path":"/v1/items"}`); rp.status != 200 {
				t.Fatalf("check: %d %s", rp.status, rp.body)
			}
			after := getUsage(t, r.base, q)
			for i := range before.Limits {
				if after.Limits[i].Remaining != before.Limits[i].Remaining-1 || after.Limits[i].Used != 1 || after.Limits[i].ResetAt == "" {
					t.Fatalf("limit %d: before %+v, after %+v: want exactly one unit spent", i, before.Limits[i], after.Limits[i])
				}
			}
		})
	}
}

// TestUsageDescriptors: GET /v1/usage with domain= and descriptors reports every limit of
// a descriptor with several (rate_limits), nothing spent.
func TestUsageDescriptors(t *testing.T) {
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			cfg := parseConfig(t, configFile("billing.yaml", burstAndQuotaDomain))
			r, _ := newServer(t, k, cfg, Options{})
			q := url.Values{"domain": {"billing"}, "descriptor": {"customer=c1"}}
			u := getUsage(t, r.base, q)
			if len(u.Limits) != 2 || u.Limits[0].Name != "burst" || u.Limits[1].Name != "monthly" || u.Limits[1].Remaining != 5 {
				t.Fatalf("usage %+v", u)
			}
			if rp := do(t, "POST", r.base+"/v1/check", `{"domain":"billing","descriptors":[{"entries":[{"key":"customer","value":"c1"}]}]}`); rp.status != 200 {
				t.Fatalf("check: %d %s", rp.status, rp.body)
			}
			u = getUsage(t, r.base, q)
			if u.Limits[0].Remaining != 1 || u.Limits[1].Remaining != 4 || u.Limits[1].Used != 1 {
				t.Fatalf("after one check: %+v", u)
			}
		})
	}
}
