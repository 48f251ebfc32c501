package server

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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

// TestResetAtIsAPeriodBoundary: a calendar quota's reset_at is the period boundary
// itself, though the store decided microseconds before or after the server's now; any
// other limit's is now plus ResetAfter.
func TestResetAtIsAPeriodBoundary(t *testing.T) {
	zone, err := sluice.ParseZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cal := sluice.Calendar{Unit: sluice.CalendarMonth, Zone: zone}
	month := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: 24 * time.Hour, Calendar: cal}
	now := time.Date(2026, 12, 7, 19, 8, 20, 565135821, time.UTC)
	_, end := cal.Bounds(now) // 2026-12-31T23:00:00Z
	for _, skew := range []time.Duration{0, 34288 * time.Nanosecond, -34288 * time.Nanosecond, 3 * time.Second, -3 * time.Second} {
		d := sluice.Decision{Limit: month, ResetAfter: end.Sub(now) + skew}
		if got := resetAt(now, d).UTC().Format(time.RFC3339Nano); got != "2026-12-31T23:00:00Z" {
			t.Errorf("skew %v: reset_at %s, want the period boundary 2026-12-31T23:00:00Z", skew, got)
		}
	}
	d := sluice.Decision{Limit: sluice.PerSecond(10), ResetAfter: 1500 * time.Microsecond}
	if got := resetAt(now, d); !got.Equal(now.Add(1500 * time.Microsecond)) {
		t.Errorf("a rate limit's reset_at %v, want now+ResetAfter", got)
	}
}
