package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadDomain writes one envoyproxy/ratelimit file to a temporary directory, loads the
// directory and returns the named domain.
func loadDomain(t *testing.T, content string) *Domain {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "config.yaml", content)
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(c.Domains) != 1 {
		t.Fatalf("got %d domains, want 1", len(c.Domains))
	}
	return c.Domains[0]
}

// e builds a descriptor from key, value pairs.
func e(kv ...string) Descriptor {
	var d Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, Entry{kv[i], kv[i+1]})
	}
	return d
}

// want describes one expected Match.
type want struct {
	status  Status
	fullKey string // Rule.FullKey; "" when no rule
	rate    int64  // Limit.Rate for Limited
	period  time.Duration
	alg     sluice.Algorithm
	shadow  bool
}

func checkMatches(t *testing.T, d *Domain, descs []Descriptor, wants []want) {
	t.Helper()
	got, err := d.Match(descs)
	if err != nil {
		t.Fatalf("Match: %v", err)
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d matches, want %d", len(got), len(wants))
	}
	for i, w := range wants {
		m := got[i]
		fk := ""
		if m.Rule != nil {
			fk = m.Rule.FullKey
		}
		if m.Status != w.status || fk != w.fullKey || m.Shadow != w.shadow {
			t.Errorf("descriptor %d %v: got %v %q shadow=%v, want %v %q shadow=%v",
				i, descs[i].Entries, m.Status, fk, m.Shadow, w.status, w.fullKey, w.shadow)
			continue
		}
		if w.status == Limited {
			wl := sluice.Limit{Algorithm: w.alg, Rate: w.rate, Period: w.period}
			if m.Limit.Algorithm != wl.Algorithm || m.Limit.Rate != wl.Rate || m.Limit.Period != wl.Period {
				t.Errorf("descriptor %d: limit %v, want %v", i, m.Limit, wl)
			}
			if m.Key == "" {
				t.Errorf("descriptor %d: empty counter key", i)
			}
		}
		if (w.status == NoMatch || w.status == Unlimited || w.status == Replaced) && m.Key != "" {
			t.Errorf("descriptor %d: %v has counter key %q; it must not touch the store", i, m.Status, m.Key)
		}
	}
}

func fw(rate int64, period time.Duration, fullKey string) want {
	return want{status: Limited, fullKey: fullKey, rate: rate, period: period, alg: sluice.FixedWindow}
}

// The examples of the envoyproxy/ratelimit README ("The configuration format"), each with
// the decisions the README describes.
func TestReferenceReadmeExamples(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name   string
		config string
		descs  []Descriptor
		wants  []want
	}{
		{
			name: "example 1: two values of one key",
			config: `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`,
			descs: []Descriptor{e("database", "users"), e("database", "default"), e("database", "other"), e("db", "users")},
			wants: []want{
				fw(500, time.Second, "mongo_cps.database_users"),
				fw(500, time.Second, "mongo_cps.database_default"),
				{status: NoMatch},
				{status: NoMatch},
			},
		},
		{
			name: "example 2: nested descriptors and a key without value",
			config: `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
			descs: []Descriptor{
				e("message_type", "marketing", "to_number", "2061111111"),
				e("message_type", "marketing", "to_number", "2062222222"),
				e("to_number", "2061111111"),
				e("message_type", "marketing"), // placeholder level: no limit of its own
				e("message_type", "transactional", "to_number", "2061111111"),
			},
			wants: []want{
				fw(5, day, "messaging.message_type_marketing.to_number"),
				fw(5, day, "messaging.message_type_marketing.to_number"),
				fw(100, day, "messaging.to_number"),
				{status: NoMatch},
				{status: NoMatch},
			},
		},
		{
			name: "example 3: key/value is preferred over key alone; 0 blocks",
			config: `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
			descs: []Descriptor{e("remote_address", "50.0.0.1"), e("remote_address", "50.0.0.5")},
			wants: []want{
				fw(10, time.Second, "edge_proxy_per_ip.remote_address"),
				{status: Blocked, fullKey: "edge_proxy_per_ip.remote_address_50.0.0.5"},
			},
		},
		{
			name: "example 4: the request's depth must equal the rule's depth",
			config: `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
  - key: other
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`,
			descs: []Descriptor{
				e("key", "value", "subkey", "subvalue"),
				e("other", "value", "subkey", "subvalue"),
				e("key", "value"),
			},
			wants: []want{
				{status: NoMatch},
				fw(300, time.Second, "example4.other_value.subkey"),
				fw(300, time.Second, "example4.key_value"),
			},
		},
		{
			name: "example 5: unlimited never reaches the store",
			config: `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`,
			descs: []Descriptor{e("ldap", "x"), e("azure", "y")},
			wants: []want{
				{status: Unlimited, fullKey: "internal.ldap"},
				fw(100, time.Minute, "internal.azure"),
			},
		},
		{
			name: "example 6: shadow_mode",
			config: `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`,
			descs: []Descriptor{
				e("service", "auth-service", "user", "user-a"),
				e("service", "auth-service", "user", "user-b"),
			},
			wants: []want{
				{status: Limited, fullKey: "example6.service.user_user-a", rate: 10, period: time.Second, alg: sluice.FixedWindow, shadow: true},
				fw(20, time.Second, "example6.service.user_user-b"),
			},
		},
		{
			name: "example 7: replaces",
			config: `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`,
			// (key_1, value_1), (key_2, value_2), (user, bkthomps): the 5/s limit is
			// replaced by the 10/s one and is not spent.
			descs: []Descriptor{
				e("key_1", "value_1", "user", "bkthomps"),
				e("key_2", "value_2", "user", "bkthomps"),
			},
			wants: []want{
				{status: Replaced, fullKey: "example7.key_1_value_1.user_bkthomps"},
				fw(10, time.Second, "example7.key_2_value_2.user_bkthomps"),
			},
		},
		{
			name: "example 9: value prefix wildcard",
			config: `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
			descs: []Descriptor{e("key1", "value_1"), e("key1", "value_2"), e("key1", "value"), e("key1", "valu")},
			wants: []want{
				fw(20, time.Minute, "example9.key1_value*"),
				fw(20, time.Minute, "example9.key1_value*"),
				fw(20, time.Minute, "example9.key1_value*"),
				{status: NoMatch},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := loadDomain(t, tt.config)
			checkMatches(t, d, tt.descs, tt.wants)
		})
	}
}

// Example 7 alone: each rule applies when the other is not in the same request.
func TestReplacesOnlyWithinOneRequest(t *testing.T) {
	d := loadDomain(t, `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
`)
	checkMatches(t, d, []Descriptor{e("key_1", "value_1", "user", "bkthomps")},
		[]want{fw(5, time.Second, "example7.key_1_value_1.user_bkthomps")})
	checkMatches(t, d, []Descriptor{e("key_2", "value_2", "user", "bkthomps")},
		[]want{fw(10, time.Second, "example7.key_2_value_2.user_bkthomps")})
}

func TestWildcardPrecedence(t *testing.T) {
	d := loadDomain(t, `
domain: w
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: "/api/v2/*"
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: /api/v2/health
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value: "acme-*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: region
    descriptors:
      - key: zone
        value: "*"
        rate_limit: {unit: second, requests_per_unit: 7}
`)
	checkMatches(t, d,
		[]Descriptor{
			e("path", "/api/v2/health"), // exact beats every wildcard
			e("path", "/api/v2/users"),  // longest prefix wins
			e("path", "/api/v1/users"),
			e("path", "/other"), // "*" beats the key alone
			e("path", ""),       // "*" matches an empty value too, as in the reference
			e("region", "eu", "zone", "a"),
			e("zone", "a"),
		},
		[]want{
			fw(5, time.Second, "w.path_/api/v2/health"),
			fw(4, time.Second, "w.path_/api/v2/*"),
			fw(3, time.Second, "w.path_/api/*"),
			fw(2, time.Second, "w.path_*"),
			fw(2, time.Second, "w.path_*"),
			fw(7, time.Second, "w.region.zone_*"),
			{status: NoMatch},
		})

	// share_threshold: every value under the wildcard shares one counter; without it each
	// value has its own.
	ms, err := d.Match([]Descriptor{e("tenant", "acme-1"), e("tenant", "acme-2"), e("path", "/a"), e("path", "/b")})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Key != ms[1].Key {
		t.Errorf("share_threshold: keys %q and %q differ, want one shared counter", ms[0].Key, ms[1].Key)
	}
	if ms[2].Key == ms[3].Key {
		t.Errorf("wildcard without share_threshold: both values use counter %q", ms[2].Key)
	}
}

// No backtracking: once an exact value matched at a level, a key-only sibling is not
// tried for the deeper levels (as in the reference's GetLimit).
func TestNoBacktracking(t *testing.T) {
	d := loadDomain(t, `
domain: nb
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
`)
	checkMatches(t, d,
		[]Descriptor{e("a", "x", "b", "other"), e("a", "y", "b", "other"), e("a", "x", "b", "only")},
		[]want{{status: NoMatch}, fw(2, time.Second, "nb.a.b"), fw(1, time.Second, "nb.a_x.b_only")})
}

func TestAlgorithmExtensionAndUnits(t *testing.T) {
	d := loadDomain(t, `
domain: ext
descriptors:
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 150}
  - key: week
    rate_limit: {unit: WEEK, requests_per_unit: 7}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 365}
`)
	ms, err := d.Match([]Descriptor{e("gcra", "1"), e("week", "1"), e("month", "1"), e("year", "1")})
	if err != nil {
		t.Fatal(err)
	}
	wantLimits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second, Burst: 150},
		{Algorithm: sluice.FixedWindow, Rate: 7, Period: 7 * 24 * time.Hour},
		{Algorithm: sluice.FixedWindow, Rate: 30, Period: 30 * 24 * time.Hour},
		{Algorithm: sluice.FixedWindow, Rate: 365, Period: 365 * 24 * time.Hour},
	}
	for i, wl := range wantLimits {
		if ms[i].Status != Limited || ms[i].Limit != wl {
			t.Errorf("%d: %v %v, want limited %v", i, ms[i].Status, ms[i].Limit, wl)
		}
	}
	if ms[1].Rule.Unit != UnitWeek || ms[1].Rule.RequestsPerUnit != 7 {
		t.Errorf("week rule reports %v %d", ms[1].Rule.Unit, ms[1].Rule.RequestsPerUnit)
	}
}

func TestOverride(t *testing.T) {
	d := loadDomain(t, `
domain: o
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, name: n}
    shadow_mode: true
  - key: r
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: n}]}
`)
	ms, err := d.Match([]Descriptor{
		{Entries: []Entry{{"k", "v"}}, Override: &LimitOverride{RequestsPerUnit: 42, Unit: UnitMinute}},
		{Entries: []Entry{{"zzz", "v"}}, Override: &LimitOverride{RequestsPerUnit: 0, Unit: UnitHour}},
		e("r", "x"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The override wins over the configured rule, is not shadowed and is not replaced
	// (it has no name), as in the reference.
	if m := ms[0]; m.Status != Limited || m.Limit != (sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 42, Period: time.Minute}) || m.Shadow {
		t.Errorf("override: %+v", m)
	}
	if ms[1].Status != Blocked {
		t.Errorf("override with 0: %v, want blocked", ms[1].Status)
	}
	if _, err := d.Match([]Descriptor{{Entries: []Entry{{"k", "v"}}, Override: &LimitOverride{RequestsPerUnit: 1}}}); !errors.Is(err, ErrInvalidOverride) {
		t.Errorf("unknown unit: err %v, want ErrInvalidOverride", err)
	}
}

func TestStatsKeys(t *testing.T) {
	// The reference README's example 8: detailed_metric names the request's value.
	d := loadDomain(t, `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value_to_metric: true
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	ms, err := d.Match([]Descriptor{e("key1", "unspecified_value"), e("key1", "value1"), e("key2", "v", "sub", "s")})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"example8.key1_unspecified_value", "example8.key1_value1", "example8.key2_v.sub"} {
		if ms[i].StatsKey != want {
			t.Errorf("%d: StatsKey %q, want %q", i, ms[i].StatsKey, want)
		}
	}
}

// Counter keys are unambiguous: entries that the reference's "key_value" concatenation
// would confuse get different keys.
func TestCounterKeysDistinct(t *testing.T) {
	d := loadDomain(t, `
domain: k
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
`)
	descs := []Descriptor{e("a", "b_c"), e("a_b", "c"), e("a", "x/b=y"), e("a", "x", "b", "y"), e("a", "x%2Fb%3Dy")}
	ms, err := d.Match(descs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, m := range ms {
		if m.Status != Limited {
			t.Fatalf("%d: %v", i, m.Status)
		}
		if j, dup := seen[m.Key]; dup {
			t.Errorf("descriptors %v and %v share key %q", descs[j].Entries, descs[i].Entries, m.Key)
		}
		seen[m.Key] = i
		if !strings.HasPrefix(m.Key, "envoy/k/") {
			t.Errorf("key %q lacks the domain prefix", m.Key)
		}
	}
}

func TestTestdataEnvoyExample(t *testing.T) {
	c, err := Load("testdata/envoy-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, ok := c.Domain("edge")
	if !ok {
		t.Fatal("domain edge missing")
	}
	checkMatches(t, d,
		[]Descriptor{e("remote_address", "1.2.3.4"), e("remote_address", "50.0.0.5"), e("remote_address", "10.1.2.3"),
			e("message_type", "marketing", "to_number", "1"), e("api", "x")},
		[]want{
			fw(10, time.Second, "edge.remote_address"),
			{status: Blocked, fullKey: "edge.remote_address_50.0.0.5"},
			{status: Unlimited, fullKey: "edge.remote_address_10.*"},
			fw(5, 24*time.Hour, "edge.message_type_marketing.to_number"),
			{status: Limited, fullKey: "edge.api", rate: 600, period: time.Minute, alg: sluice.GCRA},
		})
}

// TestStatsKeysPlain: a rule whose metric name holds no request value (no
// detailed_metric, no value_to_metric on its path) is named by its FullKey, whatever the
// request's values, through exact, wildcard, share_threshold and key-only levels; a
// value_to_metric level still names the request's value.
func TestStatsKeysPlain(t *testing.T) {
	d := loadDomain(t, `
domain: plain
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: tenant
    value: "acme-*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
      - key: region
        value: "eu-*"
        descriptors:
          - key: user
            value_to_metric: true
            rate_limit: {unit: day, requests_per_unit: 6}
`)
	ms, err := d.Match([]Descriptor{
		e("remote_address", "1.2.3.4"),
		e("remote_address", "10.0.0.1"),
		e("tenant", "acme-42"),
		e("message_type", "marketing", "to_number", "555"),
		e("message_type", "marketing", "region", "eu-west", "user", "bob"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		"plain.remote_address",
		"plain.remote_address_10.*",
		"plain.tenant_acme-*",
		"plain.message_type_marketing.to_number",
		"plain.message_type_marketing.region_eu-*.user_bob",
	} {
		if ms[i].StatsKey != want {
			t.Errorf("%d: StatsKey %q, want %q", i, ms[i].StatsKey, want)
		}
		if i < 4 && ms[i].StatsKey != ms[i].Rule.FullKey {
			t.Errorf("%d: StatsKey %q, FullKey %q", i, ms[i].StatsKey, ms[i].Rule.FullKey)
		}
	}
}

// TestAppendMatches: AppendMatches keeps what dst holds, reuses its capacity, and
// returns dst unchanged on error.
func TestAppendMatches(t *testing.T) {
	d := loadDomain(t, `
domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	dst := make([]Match, 1, 8)
	dst[0].Key = "kept"
	got, err := d.AppendMatches(dst, []Descriptor{e("k", "1"), e("x", "2")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || &got[0] != &dst[0] || got[0].Key != "kept" || got[1].Status != Limited || got[2].Status != NoMatch {
		t.Errorf("got %+v", got)
	}
	bad := []Descriptor{{Entries: []Entry{{"k", "v"}}, Override: &LimitOverride{RequestsPerUnit: 1}}}
	if got, err := d.AppendMatches(dst, bad); !errors.Is(err, ErrInvalidOverride) || len(got) != 1 {
		t.Errorf("bad override: %d matches, %v", len(got), err)
	}
}

// TestCounterKeyFormat pins the counter key's bytes: they name the Redis keys, so a
// change would reset every counter on upgrade.
func TestCounterKeyFormat(t *testing.T) {
	d := loadDomain(t, `
domain: d/%=
descriptors:
  - key: a
    descriptors:
      - key: "b=/"
        rate_limit: {unit: second, requests_per_unit: 1}
`)
	ms, err := d.Match([]Descriptor{e("a", "x/y=z%", "b=/", "")})
	if err != nil {
		t.Fatal(err)
	}
	if want := "envoy/d%2F%25%3D/a=x%2Fy%3Dz%25/b%3D%2F="; ms[0].Key != want {
		t.Errorf("key %q, want %q", ms[0].Key, want)
	}
}

// TestCounterKeyParts: the counter key built from the parts escaped at load is the one
// counterKey writes from the request's entries, for every kind of match (exact value,
// key alone, wildcard, share_threshold wildcard) and for text that needs escaping.
func TestCounterKeyParts(t *testing.T) {
	d := loadDomain(t, `
domain: "d/%="
descriptors:
  - key: "a="
    value: "x/y%"
    descriptors:
      - key: "b/"
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: "w%"
        value: "p=*"
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: s
        value: "q/*"
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	for _, desc := range []Descriptor{
		e("a=", "x/y%", "b/", "v=/%"),
		e("a=", "x/y%", "b/", ""),
		e("a=", "x/y%", "w%", "p=%/z"),
		e("a=", "x/y%", "s", "q/anything=%"),
		e("k", "plain"),
		e("k", "%2F"),
	} {
		ms, err := d.Match([]Descriptor{desc})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].Status != Limited {
			t.Fatalf("%v: matches %+v, want one limited", desc.Entries, ms)
		}
		_, steps := d.lookup(desc.Entries, nil)
		if want := counterKey(d.Name, desc.Entries, steps); ms[0].Key != want {
			t.Errorf("%v: key %q, want %q", desc.Entries, ms[0].Key, want)
		}
	}
}

// TestReferenceAcceptsWithWarnings: what envoyproxy/ratelimit accepts silently loads here
// too, with its meaning, and is reported in Config.Warnings with file, line and field: a
// rate_limit without requests_per_unit (0: every request denied), a replaces name that
// matches nothing (both limits stay in force), a field of the format where it does not
// belong (ignored), and a unit that is not one beside unlimited (ignored).
func TestReferenceAcceptsWithWarnings(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "envoy.yaml", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
  - key: b
    rate_limit:
      name: per_b
      unit: minute
      requests_per_unit: 5
      replaces: [{name: nope}]
  - key: c
    unit: minute
    rate_limit:
      unlimited: true
      unit: fortnight
      key: x
  - key: prefix*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var got []string
	for _, w := range c.Warnings {
		got = append(got, strings.TrimPrefix(w.Error(), dir+string(filepath.Separator)))
	}
	wantWarn := []string{
		"envoy.yaml:5:7: descriptors[0].rate_limit.requests_per_unit: missing: read as 0, which denies every request (write 0 to say so)",
		"envoy.yaml:13:5: descriptors[2].unit: is not a field here (known fields: key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold): ignored, as envoyproxy/ratelimit ignores it",
		"envoy.yaml:17:7: descriptors[2].rate_limit.key: is not a field here (known fields: unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, calendar, zone, anchor_day): ignored, as envoyproxy/ratelimit ignores it",
		`envoy.yaml:16:13: descriptors[2].rate_limit.unit: "fortnight" is not a unit, and unlimited ignores it (remove it)`,
		`envoy.yaml:19:22: descriptors[3].share_threshold: ignored: a key ending in '*' is a literal key here, not the reference's key wildcard`,
		`envoy.yaml:11:25: descriptors[1].rate_limit.replaces[0].name: no rate_limit in domain "d" is named "nope": it replaces nothing`,
	}
	if strings.Join(got, "\n") != strings.Join(wantWarn, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantWarn, "\n"))
	}
	d, _ := c.Domain("d")
	checkMatches(t, d, []Descriptor{e("a", "x"), e("b", "y"), e("c", "z")}, []want{
		{status: Blocked, fullKey: "d.a"},
		fw(5, time.Minute, "d.b"),
		{status: Unlimited, fullKey: "d.c"},
	})
}

// TestReferenceRejects: what envoyproxy/ratelimit rejects, and sluice used to accept: a
// requests_per_unit that is not a 32-bit unsigned integer beside unlimited (which ignores
// the value, not its type), and, inside a misplaced field, a name the format does not
// know or a list of something other than mappings.
func TestReferenceRejects(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"requests_per_unit empty beside unlimited": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: ''}\n",
			`e.yaml:4:54: descriptors[0].rate_limit.requests_per_unit: must be an integer, got ""`},
		"requests_per_unit negative beside unlimited": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: -1}\n",
			"e.yaml:4:54: descriptors[0].rate_limit.requests_per_unit: must not be negative, got -1"},
		"a valid unit beside unlimited": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: Second}\n",
			"e.yaml:4:41: descriptors[0].rate_limit.unit: must not be set when unlimited is true"},
		"an unknown name inside a misplaced field": {"domain: d\ndescriptors:\n  - key: a\n    unit: {bogus: 1}\n",
			"e.yaml:4:12: descriptors[0].unit.bogus: unknown field"},
		"a list of scalars inside a misplaced field": {"domain: d\ndescriptors:\n  - key: a\n    name: [x]\n",
			"e.yaml:4:12: descriptors[0].name[0]: must be a mapping"},
	} {
		_, err := Parse(File{Name: "e.yaml", Data: []byte(tc.yaml)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// TestQuotaMode: quota_mode, like shadow_mode, makes a descriptor one that never denies.
func TestQuotaMode(t *testing.T) {
	c, err := Parse(File{Name: "q.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := c.Domain("d")
	ms, err := d.Match([]Descriptor{e("a", "x"), e("b", "y")})
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].Shadow || !ms[0].Rule.QuotaMode || ms[0].Rule.Shadow || ms[1].Shadow || ms[1].Rule.QuotaMode {
		t.Fatalf("a: Shadow %v QuotaMode %v; b: Shadow %v QuotaMode %v", ms[0].Shadow, ms[0].Rule.QuotaMode, ms[1].Shadow, ms[1].Rule.QuotaMode)
	}
	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(dump), `"quota_mode": true`); n != 1 {
		t.Errorf("the dump shows quota_mode %d times, want once:\n%s", n, dump)
	}
}
