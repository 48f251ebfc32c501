package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
)

const calendarPolicies = `policies:
  - name: monthly
    rate: 3
    period: calendar_month
    zone: Europe/Berlin
    anchor_day: 31
    key: {type: user, header: X-Customer}
  - name: daily
    rate: 3
    period: calendar_day
    zone: America/New_York
    key: {type: user, header: X-Customer}
  - name: weekly
    rate: 3
    period: calendar_week
    zone: Pacific/Kiritimati
    key: {type: user, header: X-Customer}
`

const calendarDomain = `domain: billing
descriptors:
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true, zone: Europe/Berlin, anchor_day: 31}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 3, calendar: true, zone: America/New_York}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 3, calendar: true, zone: Pacific/Kiritimati}
`

func configFile(name, content string) config.File {
	return config.File{Name: name, Data: []byte(content)}
}

func parseConfig(t testing.TB, files ...config.File) *config.Config {
	t.Helper()
	cfg, err := config.Parse(files...)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestCalendarEndToEnd runs calendar quotas in three zones through the JSON API and the
// Envoy gRPC API, on memory and on Redis, with the clock set just before a period start:
// the quota denies with Retry-After and reset running exactly to the period start, RateLimit-Policy's w is the period's length, and at the period
// start the quota is whole again.
func TestCalendarEndToEnd(t *testing.T) {
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	cases := []struct { // in time order: the clock never goes back
		name  string
		unit  string
		start time.Time // a period start
		prev  time.Duration
	}{
		// 28 February 2030 starts the anchor-31 period in Berlin; the one before began on
		// 31 January.
		{"monthly", "calendar_month", time.Date(2030, 2, 28, 0, 0, 0, 0, zone("Europe/Berlin")), 28 * 24 * time.Hour},
		// Monday in Kiritimati, 14 hours ahead of UTC: Sunday 10:00 UTC.
		{"weekly", "calendar_week", time.Date(2030, 3, 11, 0, 0, 0, 0, zone("Pacific/Kiritimati")), 7 * 24 * time.Hour},
		// The day after spring forward in New York: the day before had 23 hours.
		{"daily", "calendar_day", time.Date(2030, 3, 11, 0, 0, 0, 0, zone("America/New_York")), 23 * time.Hour},
	}
	cfg := parseConfig(t, config.File{Name: "policies.yaml", Data: []byte(calendarPolicies)}, config.File{Name: "billing.yaml", Data: []byte(calendarDomain)})
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, clock := newServer(t, k, cfg, Options{})
			ctx := context.Background()
			for _, c := range cases {
				// 5 s before: on Redis a key's TTL runs on the server's real clock, so a
				// state that ends a test-clock millisecond later would expire meanwhile.
				before := c.start.Add(-5 * time.Second)
				clock.Set(before)
				// JSON API
				body := fmt.Sprintf(`{"policy":%q,"key":"customer-1"}`, c.name)
				for i := 0; i < 3; i++ {
					if rp := do(t, "POST", r.base+"/v1/check", body); rp.status != 200 {
						t.Fatalf("%s: check %d: %d %s", c.name, i, rp.status, rp.body)
					}
				}
				rp := do(t, "POST", r.base+"/v1/check", body)
				ls := limits(t, rp)[0]
				if rp.status != 429 || ls.RetryAfterMs != 5000 || ls.ResetAfterMs != 5000 || ls.Period != c.unit {
					t.Fatalf("%s: over the quota: %d %s", c.name, rp.status, rp.body)
				}
				if ls.WindowSeconds != int64(c.prev/time.Second) {
					t.Fatalf("%s: window_seconds %d, want %d", c.name, ls.WindowSeconds, int64(c.prev/time.Second))
				}
				if got, want := rp.header.Get("RateLimit-Policy"), fmt.Sprintf(`%q;q=3;w=%d`, c.name, int64(c.prev/time.Second)); got != want {
					t.Fatalf("%s: RateLimit-Policy %q, want %q", c.name, got, want)
				}
				if got := rateLimitFields(t, rp.header)[c.name]; got != [2]int64{0, 5} || rp.header.Get("Retry-After") != "5" {
					t.Fatalf("%s: RateLimit %v, Retry-After %q", c.name, got, rp.header.Get("Retry-After"))
				}
				// gRPC, on its own counter
				req := &rlsv3.RateLimitRequest{Domain: "billing", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(c.name, "customer-1")}}
				for i := 0; i < 3; i++ {
					resp, err := r.rls.ShouldRateLimit(ctx, req)
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						t.Fatalf("%s: gRPC %d: %v %v", c.name, i, resp, err)
					}
				}
				resp, err := r.rls.ShouldRateLimit(ctx, req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].DurationUntilReset.AsDuration() != 5*time.Second {
					t.Fatalf("%s: gRPC over the quota: %v %v", c.name, resp, err)
				}

				// The period start: whole again, resetting at the next period start.
				clock.Set(c.start)
				rp = do(t, "POST", r.base+"/v1/check", body)
				ls = limits(t, rp)[0]
				_, end := cfgCalendar(t, cfg, c.name).Bounds(c.start)
				if rp.status != 200 || ls.Remaining != 2 || ls.ResetAfterMs != end.Sub(c.start).Milliseconds() {
					t.Fatalf("%s: at the period start: %d %s (want reset after %v)", c.name, rp.status, rp.body, end.Sub(c.start))
				}
				resp, err = r.rls.ShouldRateLimit(ctx, req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 ||
					resp.Statuses[0].DurationUntilReset.AsDuration() != end.Sub(c.start) {
					t.Fatalf("%s: gRPC at the period start: %v %v", c.name, resp, err)
				}
			}
		})
	}
}

func cfgCalendar(t *testing.T, cfg *config.Config, policy string) interface {
	Bounds(time.Time) (time.Time, time.Time)
} {
	p, ok := cfg.Policy(policy)
	if !ok {
		t.Fatalf("no policy %q", policy)
	}
	return p.Limit.Calendar
}

const burstAndQuotaDomain = `domain: billing
descriptors:
  - key: customer
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
      - {name: monthly, unit: month, requests_per_unit: 5, calendar: true, zone: Europe/Berlin}
`

// TestBurstAndQuotaOnOneDescriptor: a burst limit and a calendar-month quota on one
// descriptor (rate_limits), over gRPC on memory and Redis. Both are reported, each under
// its own name; the burst denies without spending the quota, and the quota denies without
// spending the burst.
func TestBurstAndQuotaOnOneDescriptor(t *testing.T) {
	cfg := parseConfig(t, config.File{Name: "billing.yaml", Data: []byte(burstAndQuotaDomain)})
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, clock := newServer(t, k, cfg, Options{RLSHeaders: RLSHeaders{IETF: true}})
			clock.Set(time.Date(2030, 4, 10, 12, 0, 0, 0, time.UTC))
			ctx := context.Background()
			req := &rlsv3.RateLimitRequest{Domain: "billing", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("customer", "c1")}}
			// check sends one request and compares the overall code and each limit's
			// (code, remaining).
			check := func(step string, over bool, burst, monthly [2]uint32) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := r.rls.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != over || len(resp.Statuses) != 2 {
					t.Fatalf("%s: %v", step, resp)
				}
				for i, w := range [][2]uint32{burst, monthly} {
					st := resp.Statuses[i]
					code := uint32(0)
					if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
						code = 1
					}
					if code != w[0] || st.LimitRemaining != w[1] || st.CurrentLimit.Name != []string{"burst", "monthly"}[i] {
						t.Fatalf("%s: status %d = %v, want over=%d remaining %d", step, i, st, w[0], w[1])
					}
				}
				return resp
			}
			check("1", false, [2]uint32{0, 1}, [2]uint32{0, 4})
			resp := check("2", false, [2]uint32{0, 0}, [2]uint32{0, 3})
			var policy string
			for _, h := range resp.ResponseHeadersToAdd {
				if h.Key == "RateLimit-Policy" {
					policy = h.Value
				}
			}
			if policy != `"burst";q=2;w=1, "monthly";q=5;w=2592000` {
				t.Fatalf("RateLimit-Policy %q", policy)
			}
			// The burst denies; the quota is not spent (3 remain, twice).
			check("3 burst", true, [2]uint32{1, 0}, [2]uint32{0, 3})
			check("4 burst", true, [2]uint32{1, 0}, [2]uint32{0, 3})
			clock.Advance(time.Second)
			check("5", false, [2]uint32{0, 1}, [2]uint32{0, 2})
			check("6", false, [2]uint32{0, 0}, [2]uint32{0, 1})
			clock.Advance(time.Second)
			check("7", false, [2]uint32{0, 1}, [2]uint32{0, 0})
			clock.Advance(time.Second)
			// The quota denies; the burst is not spent (2 remain, twice).
			check("8 quota", true, [2]uint32{0, 2}, [2]uint32{1, 0})
			resp = check("9 quota", true, [2]uint32{0, 2}, [2]uint32{1, 0})
			if d := resp.Statuses[1].DurationUntilReset.AsDuration(); d != time.Date(2030, 5, 1, 0, 0, 0, 0, mustLoc(t, "Europe/Berlin")).Sub(clock.Now()) {
				t.Fatalf("the quota resets in %v", d)
			}
		})
	}
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBlockedRule: a calendar rule with requests_per_unit 0 denies until the next
// period start, and advertises the period's length.
func TestCalendarBlockedRule(t *testing.T) {
	cfg := parseConfig(t, configFile("d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 0, calendar: true, zone: Europe/Berlin}\n"))
	r, clock := newServer(t, stores[0], cfg, Options{RLSHeaders: RLSHeaders{IETF: true}})
	berlin := mustLoc(t, "Europe/Berlin")
	clock.Set(time.Date(2030, 2, 27, 0, 0, 0, 0, berlin))
	resp, err := r.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].DurationUntilReset.AsDuration() != 48*time.Hour {
		t.Fatalf("%v %v", resp, err)
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == "RateLimit-Policy" && h.Value != `"d.k";q=0;w=2419200` {
			t.Fatalf("RateLimit-Policy %q", h.Value)
		}
	}
}
