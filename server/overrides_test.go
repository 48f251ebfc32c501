package server

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/override"
	"github.com/sluicehq/sluice/stack"
)

const overridePolicies = `admin:
  token_env: SERVER_TEST_ADMIN_TOKEN
identity:
  api_key_secret_env: SERVER_TEST_API_KEY_SECRET
policies:
  - name: orgs
    key: {type: user, header: X-User}
    algorithm: fixed_window
    rate: 2
    period: minute
    tier_header: X-Plan
    tiers:
      pro: {rate: 4, period: minute}
    overrides:
      "org-1:config": {rate: 6, period: minute}
  - name: keys
    key: {type: api_key, header: X-Api-Key}
    rate: 2
    period: minute
`

// TestOverridesAPI: set, read, list and remove overrides; precedence API override >
// configuration override > tier > policy, shown in source; the most specific pattern
// wins; invalid input is a 400 naming the field and changes nothing; API keys are hashed
// on arrival; /v1/config lists what is in force; /metrics counts changes; an override
// with expires_in stops applying then. On memory and Redis.
func TestOverridesAPI(t *testing.T) {
	t.Setenv("SERVER_TEST_ADMIN_TOKEN", testAdminToken)
	t.Setenv("SERVER_TEST_API_KEY_SECRET", "0123456789abcdef0123456789abcdef")
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			cfg := parseConfig(t, configFile("policies.yaml", overridePolicies))
			r, clock := newServer(t, k, cfg, Options{})
			auth := []string{"Authorization", "Bearer " + testAdminToken}
			put := func(path, body string) reply {
				t.Helper()
				return do(t, "PUT", r.base+"/v1/overrides/"+path, body, auth...)
			}
			source := func(key, tier string) (string, int64) {
				t.Helper()
				body := `{"policy":"orgs","key":"` + key + `","tier":"` + tier + `","cost":0}`
				ls := limits(t, do(t, "POST", r.base+"/v1/check", body))
				return ls[0].Source, ls[0].Rate
			}
			if s, rate := source("org-1:config", "pro"); s != "override" || rate != 6 {
				t.Fatalf("config override: %s %d", s, rate)
			}
			if s, rate := source("org-2:a", "pro"); s != "tier:pro" || rate != 4 {
				t.Fatalf("tier: %s %d", s, rate)
			}

			// Without the token nothing is set.
			if rp := do(t, "PUT", r.base+"/v1/overrides/orgs/org-2:a", `{"rate":9,"period":"1m"}`); rp.status != 401 {
				t.Fatalf("no token: %d", rp.status)
			}
			// Invalid input: 400 naming the field; nothing changes.
			for body, field := range map[string]string{
				`{"rate":0,"period":"1m"}`:                          "rate:",
				`{"rate":5,"period":"fortnight"}`:                   "period:",
				`{"rate":5,"period":"1m","algorithm":"nope"}`:       "algorithm:",
				`{"rate":5,"period":"1m","expires_in":"soon"}`:      "expires_in:",
				`{"rate":5,"period":"1m","burst":-1}`:               "burst:",
				`{"rate":5,"period":"calendar_month","zone":"X/Y"}`: "zone:",
				`{"rate":5,"period":"1m","colour":"red"}`:           "colour",
			} {
				if rp := put("orgs/org-2:a", body); rp.status != 400 || !strings.Contains(rp.body, field) {
					t.Errorf("%s: %d %s, want 400 naming %s", body, rp.status, rp.body, field)
				}
			}
			if rp := put("nosuch/x", `{"rate":5,"period":"1m"}`); rp.status != 400 || !strings.Contains(rp.body, "policy:") {
				t.Errorf("unknown policy: %d %s", rp.status, rp.body)
			}
			if rp := put("keys/ab*", `{"rate":5,"period":"1m"}`); rp.status != 400 || !strings.Contains(rp.body, "identity:") {
				t.Errorf("API key pattern: %d %s", rp.status, rp.body)
			}
			// An identity of another kind than the policy limits is refused, naming what
			// the policy expects, never taken (and hashed) as one of its own kind.
			for path, want := range map[string]string{
				"keys/203.0.113.7":     `203.0.113.7 is an IP address, and policy \"keys\" limits API keys (the X-Api-Key header)`,
				"keys/2001:db8::%2F64": `2001:db8::/64 is an IP prefix, and policy \"keys\" limits API keys`,
				"keys/user:org-1":      `\"user:org-1\" is of kind user, and policy \"keys\" limits API keys`,
				"orgs/ip:203.0.113.7":  `\"ip:203.0.113.7\" is of kind ip, and policy \"orgs\" limits user IDs (the X-User header)`,
				"nosuch/x":             `no policy named \"nosuch\" (the configuration's policies: orgs, keys)`,
			} {
				if rp := put(path, `{"rate":5,"period":"1m"}`); rp.status != 400 || !strings.Contains(rp.body, want) {
					t.Errorf("PUT %s: %d %s, want 400 saying %s", path, rp.status, rp.body, want)
				}
			}
			if rp := do(t, "GET", r.base+"/v1/overrides?policy=nosuch", "", auth...); rp.status != 400 || !strings.Contains(rp.body, "the configuration's policies: orgs, keys") {
				t.Errorf("list of an unknown policy: %d %s", rp.status, rp.body)
			}
			if rp := do(t, "GET", r.base+"/v1/overrides", "", auth...); !strings.Contains(rp.body, `"overrides":[]`) {
				t.Fatalf("after invalid input: %s", rp.body)
			}

			// Patterns: the longest prefix wins; an exact identity beats every pattern; an
			// API override beats the configuration's.
			for path, body := range map[string]string{
				"orgs/*":                 `{"rate":10,"period":"1m","reason":"everyone"}`,
				"orgs/org-2:*":           `{"rate":20,"period":"1m","reason":"org 2"}`,
				"orgs/org-2:special":     `{"rate":30,"period":"1m","reason":"one user"}`,
				"orgs/user:org-1:config": `{"rate":40,"period":"1m","reason":"printed form"}`,
			} {
				if rp := put(path, body); rp.status != 200 {
					t.Fatalf("PUT %s: %d %s", path, rp.status, rp.body)
				}
			}
			for key, want := range map[string]struct {
				source string
				rate   int64
			}{
				"org-3:a":       {"api_override:*", 10},
				"org-2:a":       {"api_override:org-2:*", 20},
				"org-2:special": {"api_override", 30},
				"org-1:config":  {"api_override", 40},
			} {
				if s, rate := source(key, "pro"); s != want.source || rate != want.rate {
					t.Errorf("%s: source %s rate %d, want %s %d", key, s, rate, want.source, want.rate)
				}
			}
			rp := do(t, "GET", r.base+"/v1/overrides/orgs/org-2:*", "", auth...)
			var o override.Override
			if json.Unmarshal([]byte(rp.body), &o); rp.status != 200 || o.Spec.Rate != 20 || o.Reason != "org 2" || !strings.Contains(o.By, "SERVER_TEST_ADMIN_TOKEN") {
				t.Fatalf("GET: %d %s", rp.status, rp.body)
			}
			var list OverrideList
			rp = do(t, "GET", r.base+"/v1/overrides?policy=orgs", "", auth...)
			if json.Unmarshal([]byte(rp.body), &list); len(list.Overrides) != 4 {
				t.Fatalf("list: %s", rp.body)
			}

			// An API key is hashed on arrival: never stored or answered raw.
			if rp := put("keys/"+url.PathEscape(testAPIKey), `{"rate":7,"period":"1m"}`); rp.status != 200 || strings.Contains(rp.body, testAPIKey) {
				t.Fatalf("API key override: %d %s", rp.status, rp.body)
			}
			ls := limits(t, do(t, "POST", r.base+"/v1/check", `{"policy":"keys","key":"`+testAPIKey+`","cost":0}`))
			if ls[0].Source != "api_override" || ls[0].Rate != 7 {
				t.Fatalf("API key: %+v", ls[0])
			}
			cfgDump := do(t, "GET", r.base+"/v1/config", "", auth...)
			var dump struct {
				Policies     []any               `json:"policies"`
				APIOverrides []override.Override `json:"api_overrides"`
			}
			if err := json.Unmarshal([]byte(cfgDump.body), &dump); err != nil || len(dump.APIOverrides) != 5 || len(dump.Policies) != 2 || strings.Contains(cfgDump.body, testAPIKey) {
				t.Fatalf("/v1/config (%v): %s", err, cfgDump.body)
			}

			// Delete; expiry.
			if rp := do(t, "DELETE", r.base+"/v1/overrides/orgs/org-2:special", "", auth...); rp.status != 204 {
				t.Fatalf("DELETE: %d %s", rp.status, rp.body)
			}
			if s, _ := source("org-2:special", ""); s != "api_override:org-2:*" {
				t.Fatalf("after DELETE: %s", s)
			}
			if rp := put("orgs/org-4:x", `{"rate":50,"period":"1m","expires_in":"2s"}`); rp.status != 200 {
				t.Fatalf("PUT expiring: %d %s", rp.status, rp.body)
			}
			if s, rate := source("org-4:x", ""); s != "api_override" || rate != 50 {
				t.Fatalf("before expiry: %s %d", s, rate)
			}
			clock.Advance(2 * time.Second)
			if s, rate := source("org-4:x", ""); s != "api_override:*" || rate != 10 {
				t.Fatalf("after expiry: %s %d", s, rate)
			}
			if rp := do(t, "GET", r.base+"/v1/overrides/orgs/org-4:x", "", auth...); rp.status != 404 {
				t.Fatalf("GET expired: %d %s", rp.status, rp.body)
			}
			m := do(t, "GET", r.base+"/metrics", "")
			for _, want := range []string{`sluice_server_override_changes_total{action="set"} 6`, `sluice_server_override_changes_total{action="delete"} 1`, `sluice_server_override_changes_total{action="expire"} 1`} {
				if !strings.Contains(m.body, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		})
	}
}

// TestProxyAppliesAPIOverrides: an override set through the server's API on a shared
// store applies to `sluice proxy` too (the per-ip policy, 3 per minute, raised to 9 for
// 127.0.0.1), and is dropped when removed. On memory and Redis.
func TestProxyAppliesAPIOverrides(t *testing.T) {
	t.Setenv("SERVER_TEST_ADMIN_TOKEN", testAdminToken)
	t.Setenv("SERVER_TEST_API_KEY_SECRET", "0123456789abcdef0123456789abcdef")
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			cfg := loadConfig(t, "policies.yaml")
			r, _, st := newStackServer(t, k, cfg, stack.Options{}, Options{})
			up := newUpstream(t)
			target, _ := url.Parse(up.URL)
			p, err := NewProxy(ProxyOptions{Limiter: st.Limiter(), Upstream: target, Config: cfg, Overrides: st.Overrides, OverrideRefresh: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			base := serveProxy(t, p)
			quota := func() string {
				return do(t, "GET", base+"/things", "").header.Get("RateLimit-Policy")
			}
			if q := quota(); !strings.Contains(q, `"per-ip";q=3;w=60`) {
				t.Fatalf("before: %s", q)
			}
			auth := []string{"Authorization", "Bearer " + testAdminToken}
			if rp := do(t, "PUT", r.base+"/v1/overrides/per-ip/ip:127.0.0.1", `{"rate":9,"period":"1m"}`, auth...); rp.status != 200 {
				t.Fatalf("PUT: %d %s", rp.status, rp.body)
			}
			poll.Until(t, 5*time.Second, "the override in the quota header", func() bool { return strings.Contains(quota(), `"per-ip";q=9;w=60`) })
			if rp := do(t, "DELETE", r.base+"/v1/overrides/per-ip/127.0.0.1", "", auth...); rp.status != 204 {
				t.Fatalf("DELETE: %d %s", rp.status, rp.body)
			}
			poll.Until(t, 5*time.Second, "the override in the quota header", func() bool { return strings.Contains(quota(), `"per-ip";q=3;w=60`) })
		})
	}
}

// TestOverrideNamesTheClientsIdentity: an IP override names the identity a request from
// that address gets, however the operator writes it (an address, "ip:" and an address, a
// prefix within the aggregation): an IPv6 client is its /64, so an override written for
// one of its addresses applies to every address of that /64.
func TestOverrideNamesTheClientsIdentity(t *testing.T) {
	t.Setenv("SERVER_TEST_ADMIN_TOKEN", testAdminToken)
	cfg := parseConfig(t, configFile("policies.yaml", `admin:
  token_env: SERVER_TEST_ADMIN_TOKEN
policies:
  - {name: per-ip, key: ip, algorithm: fixed_window, rate: 2, period: minute}
`))
	r, _ := newServer(t, stores[0], cfg, Options{})
	auth := []string{"Authorization", "Bearer " + testAdminToken}
	for i, written := range []string{"ip:2001:db8:1:1::99", "2001:db8:1:2::99", "2001:db8:1:3::99/128", "ip:2001:db8:1:4::/80", "ip:198.51.100.7"} {
		rate := 10 + i
		if rp := do(t, "PUT", r.base+"/v1/overrides/per-ip/"+url.PathEscape(written), fmt.Sprintf(`{"rate":%d,"period":"1m"}`, rate), auth...); rp.status != 200 {
			t.Fatalf("PUT %s: %d %s", written, rp.status, rp.body)
		}
		client := strings.TrimPrefix(strings.Split(strings.ReplaceAll(written, "::99", "::5"), "/")[0], "ip:")
		if strings.HasSuffix(client, "::") {
			client += "5"
		}
		ls := limits(t, do(t, "POST", r.base+"/v1/check", `{"policy":"per-ip","key":"`+client+`","cost":0}`))
		if ls[0].Source != "api_override" || ls[0].Rate != int64(rate) {
			t.Errorf("override written %q, client %s: source %s rate %d, want api_override %d", written, client, ls[0].Source, ls[0].Rate, rate)
		}
	}
}
