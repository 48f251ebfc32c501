package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
)

func TestTestdataPolicies(t *testing.T) {
	c, err := Load("testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.RedisURL != "redis://127.0.0.1:6379/0" || c.Store.Deadline != 5*time.Millisecond ||
		c.Store.FailureMode != sluice.FailLocal || c.Store.LocalShare != 0.25 ||
		c.Store.DenyCache != (DenyCache{MaxBytes: 16 << 20, MaxAge: time.Second}) {
		t.Errorf("store %+v", c.Store)
	}
	if c.Admin.TokenEnv != "SLUICE_ADMIN_TOKEN" {
		t.Errorf("admin %+v", c.Admin)
	}
	wantProxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("::1/128"),
	}
	if !slices.Equal(c.Identity.TrustedProxies, wantProxies) || c.Identity.IPv6Prefix != 64 ||
		c.Identity.APIKeySecretEnv != "SLUICE_API_KEY_SECRET" {
		t.Errorf("identity %+v", c.Identity)
	}

	if o := c.Overload; o == nil || o.Limiter.MaxWait != 250*time.Millisecond || o.Limiter.DefaultReserve != 10 ||
		o.CriticalityHeader != "X-Criticality" || o.Limiter.Validate() != nil {
		t.Errorf("overload %+v", o)
	}

	perIP, ok := c.Policy("per-ip")
	if !ok {
		t.Fatal("per-ip missing")
	}
	if perIP.Limit != (sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Minute}) ||
		perIP.Key != (KeySource{Type: KeyIP}) || perIP.FailureMode != sluice.FailInherit || perIP.LocalShare != 0 {
		t.Errorf("per-ip %+v", perIP)
	}
	// per-ip names no mode: it inherits the store block's local at its 1/4.
	if f := c.Failure(perIP, sluice.FailInherit); f != (sluice.Failure{Mode: sluice.FailLocal, Share: 0.25}) {
		t.Errorf("per-ip resolves to %+v", f)
	}

	api, _ := c.Policy("api")
	if api.Key != (KeySource{Type: KeyAPIKey, Header: "X-API-Key"}) || api.FailureMode != sluice.FailClosed || api.LocalShare != 0 {
		t.Errorf("api key %+v mode %v share %v", api.Key, api.FailureMode, api.LocalShare)
	}
	gcra := func(rate int64, period time.Duration, burst int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.GCRA, Rate: rate, Period: period, Burst: burst}
	}
	for _, tt := range []struct {
		id, tier string
		want     sluice.Limit
		from     string
	}{
		{"someone", "", gcra(60, time.Minute, 0), "tier:free"},
		{"someone", "pro", gcra(600, time.Minute, 100), "tier:pro"},
		{"someone", "enterprise", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 100, Period: time.Second, Burst: 500}, "tier:enterprise"},
		{"someone", "platinum", gcra(60, time.Minute, 0), "tier:free"}, // unknown tier: the default tier
		{"4f2a9c0d3b1e5a7f8c6d2e4b9a1f3c5e7d9b2a4c6e8f0a1b3c5d7e9f1a2b4c6d", "pro", gcra(10000, time.Minute, 0), "override"},
		// identity_tiers: the identity's tier, whatever tier the request names.
		{"9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d", "free", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 100, Period: time.Second, Burst: 500}, "tier:enterprise"},
	} {
		got, from := api.LimitFor(tt.id, tt.tier)
		if got != tt.want || from != tt.from {
			t.Errorf("LimitFor(%q, %q) = %v %s, want %v %s", tt.id, tt.tier, got, from, tt.want, tt.from)
		}
	}

	for _, tt := range []struct {
		method, target string
		want           string // pattern, "" for none
	}{
		{"POST", "/v1/items", "POST /v1/items"},
		{"GET", "/v1/items", ""},
		{"GET", "/v1/items/42", "GET /v1/items/{id}"},
		{"HEAD", "/v1/items/42", "GET /v1/items/{id}"}, // GET patterns match HEAD, as in ServeMux
		{"DELETE", "/v1/items/42", ""},
		{"GET", "/v1/export/2024/all.csv", "/v1/export/"},
		{"GET", "/v1/export", "/v1/export/"}, // a subtree matches its own name (package route)
		// Spellings of one path (package route): a trailing slash, ;parameters, an
		// escaped slash, letter case, merged slashes and dot segments.
		{"POST", "/v1/items/", "POST /v1/items"},
		{"POST", "/v1/items;x=y", "POST /v1/items"},
		{"POST", "/v1%2Fitems", "POST /v1/items"},
		{"POST", "/V1/ITEMS", "POST /v1/items"},
		{"POST", "//v1///items", "POST /v1/items"},
		{"POST", "/v1/x/../items", "POST /v1/items"},
		{"GET", "/V1/Items;v=2/42/", "GET /v1/items/{id}"},
		{"GET", "/other", ""},
	} {
		r, ok := api.Route(httptest.NewRequest(tt.method, tt.target, nil))
		if got := r.Pattern; got != tt.want || ok != (tt.want != "") {
			t.Errorf("Route(%s %s) = %q %v, want %q", tt.method, tt.target, got, ok, tt.want)
		}
	}
	if r, _ := api.Route(httptest.NewRequest("GET", "/v1/export/x", nil)); r.Limit != (sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}) {
		t.Errorf("export route limit %v", r.Limit)
	}

	shadow, _ := c.Policy("user-shadow")
	if !shadow.Shadow || shadow.Key != (KeySource{Type: KeyUser, Header: "X-User-ID"}) || shadow.FailureMode != sluice.FailLocal || shadow.LocalShare != 0.5 {
		t.Errorf("user-shadow %+v", shadow)
	}
	if _, ok := perIP.Route(httptest.NewRequest("GET", "/", nil)); ok {
		t.Error("a policy without routes matched a route")
	}
}

func TestDefaultConfig(t *testing.T) {
	c := Default()
	if c != Default() {
		t.Error("Default returns different configs")
	}
	demo, ok := c.Policy("demo")
	if !ok || demo.Limit != (sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second, Burst: 20}) {
		t.Fatalf("demo policy %+v", demo)
	}
	if c.Store.RedisURL != "" {
		t.Errorf("built-in config uses Redis %q; it must run on the memory store", c.Store.RedisURL)
	}
	d, ok := c.Domain("demo")
	if !ok {
		t.Fatal("built-in domain demo missing")
	}
	ms, err := d.Match([]Descriptor{e("path", "/healthz"), e("path", "/x"), e("remote_address", "1.2.3.4")})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Status != Unlimited || ms[1].Status != Limited || ms[2].Status != Limited {
		t.Errorf("demo matches %v %v %v", ms[0].Status, ms[1].Status, ms[2].Status)
	}
	// The embedded files load the same from disk.
	dir := t.TempDir()
	for _, f := range DefaultFiles() {
		writeFile(t, dir, filepath.Base(f.Name), string(f.Data))
	}
	if _, err := Load(dir); err != nil {
		t.Fatalf("built-in files written to disk: %v", err)
	}
}

func TestDirectoryLoading(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b-policies.yml", "policies:\n  - {name: p, rate: 1, period: 1s}\n")
	writeFile(t, dir, "a-domain.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, dir, ".hidden.yaml", "this is not: [valid")
	writeFile(t, dir, "README.txt", "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 2 || filepath.Base(c.Files[0]) != "a-domain.yaml" || filepath.Base(c.Files[1]) != "b-policies.yml" {
		t.Errorf("files %v", c.Files)
	}
	if _, ok := c.Policy("p"); !ok {
		t.Error("policy p missing")
	}
	if _, ok := c.Domain("d"); !ok {
		t.Error("domain d missing")
	}
	c2, err := Load(dir)
	if err != nil || c2.Digest != c.Digest {
		t.Errorf("same files, digests %s and %s (%v)", c.Digest, c2.Digest, err)
	}
	writeFile(t, dir, "b-policies.yml", "policies:\n  - {name: p, rate: 2, period: 1s}\n")
	if c3, err := Load(dir); err != nil || c3.Digest == c.Digest {
		t.Errorf("changed file, same digest (%v)", err)
	}

	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .yaml or .yml files") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestDenyCache(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want DenyCache
		dump string
	}{
		{"store:\n  deadline: 5ms\n", DenyCache{}, ""},
		{"store:\n  deny_cache: off\n", DenyCache{Off: true}, `"deny_cache":{"off":true}`},
		{"store:\n  deny_cache: {max_bytes: 0}\n", DenyCache{Off: true}, `"deny_cache":{"off":true}`},
		{"store:\n  deny_cache: {max_age: 250ms}\n", DenyCache{MaxAge: 250 * time.Millisecond}, `"deny_cache":{"max_age":"250ms"}`},
		{"store:\n  deny_cache: {max_bytes: 1048576, max_age: 2s}\n", DenyCache{MaxBytes: 1 << 20, MaxAge: 2 * time.Second}, `"deny_cache":{"max_bytes":1048576,"max_age":"2s"}`},
	} {
		c, err := Load(writeFile(t, t.TempDir(), "s.yaml", tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.Store.DenyCache != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.yaml, c.Store.DenyCache, tc.want)
		}
		indented, err := c.Dump()
		if err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, indented); err != nil {
			t.Fatal(err)
		}
		dump := compact.String()
		if got := strings.Contains(dump, `"deny_cache"`); got != (tc.dump != "") || !strings.Contains(dump, tc.dump) {
			t.Errorf("%q: dump %s, want %s", tc.yaml, dump, tc.dump)
		}
	}
}

func TestRedisURLFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "s.yaml", "store:\n  redis_url_env: SLUICE_TEST_REDIS_URL\n")
	t.Setenv("SLUICE_TEST_REDIS_URL", "redis://:s3cret@10.1.1.1:6379/2")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.RedisURL != "redis://:s3cret@10.1.1.1:6379/2" {
		t.Errorf("RedisURL %q", c.Store.RedisURL)
	}
	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(dump), "s3cret") {
		t.Errorf("Dump leaks the Redis password:\n%s", dump)
	}
	if !json.Valid(dump) {
		t.Error("Dump is not JSON")
	}
	t.Setenv("SLUICE_TEST_REDIS_URL", "")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "SLUICE_TEST_REDIS_URL is not set") {
		t.Errorf("unset variable: %v", err)
	}
}

func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "token", "  from-file\n")
	t.Setenv("SLUICE_TEST_TOKEN", "from-env")
	for _, tt := range []struct {
		admin   Admin
		want    string
		wantErr bool
	}{
		{Admin{TokenEnv: "SLUICE_TEST_TOKEN"}, "from-env", false},
		{Admin{TokenFile: tokenFile}, "from-file", false},
		{Admin{TokenEnv: "SLUICE_TEST_UNSET", TokenFile: tokenFile}, "from-file", false},
		{Admin{TokenEnv: "SLUICE_TEST_UNSET"}, "", true},
		{Admin{TokenFile: filepath.Join(dir, "nope")}, "", true},
		{Admin{}, "", true},
	} {
		got, err := tt.admin.Token()
		if got != tt.want || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrNoAdminToken)) {
			t.Errorf("%+v.Token() = %q, %v", tt.admin, got, err)
		}
	}
}

func TestParsePeriodAndUnits(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1s": time.Second, "90s": 90 * time.Second, "1m30s": 90 * time.Second, "24h": 24 * time.Hour,
		"second": time.Second, "Minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
		"250ms": 250 * time.Millisecond,
	} {
		if got, err := ParsePeriod(in); err != nil || got != want {
			t.Errorf("ParsePeriod(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1s", "month", "1d", "fortnight"} {
		if _, err := ParsePeriod(in); err == nil {
			t.Errorf("ParsePeriod(%q) succeeded", in)
		}
	}
	for _, u := range []Unit{UnitSecond, UnitMinute, UnitHour, UnitDay, UnitWeek, UnitMonth, UnitYear} {
		p, err := ParseUnit(strings.ToUpper(u.String()))
		if err != nil || p != u {
			t.Errorf("ParseUnit(%s) = %v, %v", u, p, err)
		}
		if back, ok := UnitOf(u.Period()); !ok || back != u {
			t.Errorf("UnitOf(%v) = %v", u.Period(), back)
		}
	}
	if _, err := ParseUnit("unknown"); err == nil {
		t.Error(`ParseUnit("unknown") succeeded`)
	}
}

// TestOverrideForms: an override is accepted in the form sluice prints an identity in
// (keys.Identity.String, `sluice key`) and as the bare ID, and resolves to the identity's
// ID; any other form is rejected at load with file:line.
func TestOverrideForms(t *testing.T) {
	mac := "4f2a9c0d3b1e5a7f8c6d2e4b9a1f3c5e7d9b2a4c6e8f0a1b3c5d7e9f1a2b4c6d"
	for _, tc := range []struct {
		key, written, id string
	}{
		{"api_key", "api_key:" + mac, mac},
		{"api_key", "hmac:" + mac, mac},
		{"api_key", mac, mac},
		{"user", "user:alice", "alice"},
		{"user", "user:a%3Ab", "a:b"}, // as the logs escape it
		{"user", "alice", "alice"},
		{"ip", "ip:203.0.113.7", "203.0.113.7"},
		{"ip", "203.0.113.7", "203.0.113.7"},
		{"ip", "ip:2001%3Adb8%3A%3A/64", "2001:db8::/64"},
		{"ip", "ip:2001:db8::/64", "2001:db8::/64"},
	} {
		c, err := Parse(File{Name: "p.yaml", Data: []byte("policies:\n  - name: p\n    key: " + tc.key +
			"\n    rate: 1\n    period: 1s\n    overrides:\n      \"" + tc.written + "\": {rate: 5, period: 1s}\n")})
		if err != nil {
			t.Errorf("%s override %q: %v", tc.key, tc.written, err)
			continue
		}
		p, _ := c.Policy("p")
		if _, from := p.LimitFor(tc.id, ""); from != "override" {
			t.Errorf("%s override %q does not apply to ID %q", tc.key, tc.written, tc.id)
		}
	}
	for _, tc := range []struct{ key, written, want string }{
		{"api_key", "hmac:4f2a9c", "api_key:<64 lower-case hex digits>"},
		{"api_key", "sk_live_raw", "api_key:<64 lower-case hex digits>"},
		{"api_key", "user:alice", `"user:alice" is of kind user, and policy "p" limits API keys`},
		{"user", "api_key:" + mac, "is of kind api_key, and policy \"p\" limits user IDs"},
		{"ip", "ip:nonsense", "must be a client address or prefix"},
		{"ip", "2001:db8::1", "never matches: clients are limited per /64, so write ip:2001:db8::/64"},
		{"ip", "10.0.0.0/24", "never matches: clients are limited per /32"},
	} {
		_, err := Parse(File{Name: "p.yaml", Data: []byte("policies:\n  - name: p\n    key: " + tc.key +
			"\n    rate: 1\n    period: 1s\n    overrides:\n      \"" + tc.written + "\": {rate: 5, period: 1s}\n")})
		if err == nil || !strings.Contains(err.Error(), "p.yaml:7:7: policies[0].overrides") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s override %q: err %v, want p.yaml:7:7 and %q", tc.key, tc.written, err, tc.want)
		}
	}
}

func TestIdentityTiersErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"    identity_tiers: {\"user:a\": gold}\n", `p.yaml:9:32: policies[0].identity_tiers["user:a"]: names no tier of this policy: "gold"`},
		{"    identity_tiers: {\"api_key:zz\": pro}\n", `p.yaml:9:22: policies[0].identity_tiers["api_key:zz"]: "api_key:zz" is of kind api_key, and policy "p" limits user IDs (the X-User-ID header)`},
		{"    identity_tiers: {a: pro, \"user:a\": free}\n", `p.yaml:9:30: policies[0].identity_tiers["user:a"]: names the same identity as policies[0].identity_tiers.a`},
	} {
		_, err := Parse(File{Name: "p.yaml", Data: []byte("policies:\n  - name: p\n    key: user\n    default_tier: free\n    tiers:\n" +
			"      free: {rate: 1, period: 1s}\n      pro: {rate: 5, period: 1s}\n    overrides: {}\n" + tc.body)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %s", err, tc.want)
		}
	}
}

// TestParseIdentityForms: what the admin API's IdentityForm adds to a file's forms, and
// what stays refused in both.
func TestParseIdentityForms(t *testing.T) {
	mac := "4f2a9c0d3b1e5a7f8c6d2e4b9a1f3c5e7d9b2a4c6e8f0a1b3c5d7e9f1a2b4c6d"
	api := IdentityForm{
		Patterns: true,
		HashKey:  func(string) (string, error) { return mac, nil },
		ClientIP: &keys.ClientIP{IPv6Prefix: 64},
	}
	pol := func(name string, t KeyType) *Policy {
		return &Policy{Name: name, Key: KeySource{Type: t, Header: "X-H"}}
	}
	for _, tc := range []struct {
		p            *Policy
		written      string
		file, viaAPI string // "" when refused
	}{
		{pol("u", KeyUser), "org-1:*", "org-1:*", "org-1:*"},
		{pol("u", KeyUser), "user:org-1:*", "org-1:*", "org-1:*"}, // a file has no patterns: a literal ID
		{pol("u", KeyUser), "u:user:alice::", "alice", "alice"},
		{pol("u", KeyUser), "a*b*", "a*b*", ""},
		{pol("u", KeyUser), " alice", "", ""},
		{pol("k", KeyAPIKey), "sk_live_raw", "", mac},
		{pol("k", KeyAPIKey), mac, mac, mac},
		{pol("k", KeyAPIKey), "api_key:" + mac, mac, mac},
		{pol("k", KeyAPIKey), "api_key:zz", "", ""},
		{pol("k", KeyAPIKey), "203.0.113.7", "", ""},
		{pol("k", KeyAPIKey), "ab*", "", ""},
		{pol("i", KeyIP), "2001:db8::1", "2001:db8::1", "2001:db8::/64"},
		{pol("i", KeyIP), "ip:198.51.100.7", "198.51.100.7", "198.51.100.7"},
		{pol("i", KeyIP), "user:x", "", ""},
	} {
		for _, f := range []struct {
			form IdentityForm
			want string
		}{{IdentityForm{}, tc.file}, {api, tc.viaAPI}} {
			got, err := tc.p.ParseIdentity(tc.written, f.form)
			if f.want == "" && err == nil {
				t.Errorf("%s %q (API %v): got %q, want an error", tc.p.Key.Type, tc.written, f.form.Patterns, got)
			} else if f.want != "" && (err != nil || got != f.want) {
				t.Errorf("%s %q (API %v): got %q, %v, want %q", tc.p.Key.Type, tc.written, f.form.Patterns, got, err, f.want)
			}
		}
	}
}
