package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// loadErrors writes each file to a fresh directory, loads the directory and returns the
// error messages with the directory stripped, so they read "policies.yaml:12:5: ...".
func loadErrors(t *testing.T, files map[string]string) []string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		writeFile(t, dir, name, content)
	}
	_, err := Load(dir)
	if err == nil {
		t.Fatal("Load succeeded, want errors")
	}
	list := ErrorList(err)
	if len(list) == 0 {
		t.Fatalf("error %v carries no positions", err)
	}
	var out []string
	for _, e := range list {
		out = append(out, strings.ReplaceAll(e.Error(), dir+string(filepath.Separator), ""))
	}
	return out
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{
			name: "rate not positive",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    rate: 0
    period: 1s
`},
			want: []string{"policies.yaml:3:11: policies[0].rate: must be positive, got 0"},
		},
		{
			name: "keys written twice or not as plain strings",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    rate: 1
    rate: 2
    period: 1s
    tiers:
      free: {rate: 1, period: 1s}
      free: {rate: 2, period: 1s}
      [x]: {rate: 3, period: 1s}
    default_tier: free
  - {name: b, rate: 1, period: 1s, [y]: 1}
`},
			want: []string{
				"policies.yaml:4:5: policies[0].rate: duplicate key (first at line 3)",
				"policies.yaml:8:7: policies[0].tiers.free: duplicate key (first at line 7)",
				"policies.yaml:9:7: policies[0].tiers: keys must be plain strings, got a list",
				"policies.yaml:11:36: policies[1]: keys must be plain strings, got a list",
			},
		},
		{
			name: "two overrides of one identity",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    key: user
    rate: 1
    period: 1s
    overrides:
      alice: {rate: 2, period: 1s}
      "user:alice": {rate: 3, period: 1s}
`},
			want: []string{`policies.yaml:8:7: policies[0].overrides["user:alice"]: names the same identity as policies[0].overrides.alice`},
		},
		{
			name: "concurrency without lease TTL",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: concurrency
    rate: 5
`},
			want: []string{"policies.yaml:2:5: policies[0].lease: is required for a concurrency limit: the longest a request holds its slot, e.g. 30s"},
		},
		{
			name: "concurrency with a period, and a lease of another algorithm",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: concurrency
    rate: 5
    period: 1s
    lease: 30s
  - name: b
    rate: 5
    period: 1s
    lease: 30s
`},
			want: []string{
				"policies.yaml:5:13: policies[0].period: is not used by concurrency limits; a request holds its slot until it ends or its lease expires (lease)",
				"policies.yaml:10:12: policies[1].lease: applies only to concurrency limits; gcra ignores it",
			},
		},
		{
			name: "settle without ttl, on a sliding log, estimate without settle",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: sliding_log
    rate: 5
    period: 1s
    settle: {estimate: 3}
  - name: b
    rate: 5
    period: 1s
    routes:
      "POST /x": {rate: 2, period: 1s, estimate: 4}
  - name: c
    rate: 5
    period: 1s
    settle: {ttl: 1m, cost_header: "bad header"}
`},
			want: []string{
				"policies.yaml:6:13: policies[0].settle.ttl: is required: how long a reservation waits for its actual cost, e.g. 5m",
				"policies.yaml:6:13: policies[0].settle: settles costs, which sliding_log cannot (gcra, token_bucket, leaky_bucket, fixed_window and sliding_window can)",
				"policies.yaml:11:50: policies[1].routes[\"POST /x\"].estimate: needs the policy's settle block (its costs are not estimates otherwise)",
				"policies.yaml:15:36: policies[2].settle.cost_header: must be an HTTP header name, got \"bad header\"",
			},
		},
		{
			name: "concurrency lease out of range",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: concurrency
    rate: 5
    lease: 48h
`},
			want: []string{"policies.yaml:5:12: policies[0].lease: lease 48h0m0s exceeds the maximum 24h0m0s"},
		},
		{
			name: "unknown field (typo)",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    rate: 5
    perod: 1s
`},
			want: []string{
				"policies.yaml:4:5: policies[0].perod: unknown field (known fields: name, algorithm, rate, period, zone, anchor_day, burst, lease, key, shadow, failure_mode, local_share, expected_nodes, tier_header, default_tier, tiers, identity_tiers, routes, overrides, settle, criticality)",
				"policies.yaml:2:5: policies[0].period: is required",
			},
		},
		{
			name: "bad period and algorithm, all errors of the file together",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: token-buckets
    rate: 5
    period: fortnight
  - name: b
    rate: -3
    period: 1m
`},
			want: []string{
				`policies.yaml:3:16: policies[0].algorithm: unknown algorithm "token-buckets" (want one of gcra, token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log)`,
				`policies.yaml:5:13: policies[0].period: want a duration such as 1s, 1m or 24h, or one of second, minute, hour, day, week; got "fortnight"`,
				"policies.yaml:7:11: policies[1].rate: must be positive, got -3",
			},
		},
		{
			name: "rate is a string",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    rate: "100"
    period: 1s
`},
			want: []string{`policies.yaml:3:11: policies[0].rate: must be an integer, got "100"`},
		},
		{
			name: "limit rejected by sluice.Limit.Validate",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: gcra
    rate: 2000000
    period: 1s
`},
			want: []string{"policies.yaml:4:11: policies[0].rate: 2000000 per 1s spaces events less than 1µs apart; use a longer period or a window algorithm"},
		},
		{
			name: "burst on a window algorithm, failure mode typo",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    algorithm: fixed_window
    rate: 10
    period: 1s
    burst: 20
    failure_mode: opne
`},
			want: []string{
				"policies.yaml:6:12: policies[0].burst: applies only to gcra, token_bucket and leaky_bucket; fixed_window ignores it",
				`policies.yaml:7:19: policies[0].failure_mode: unknown failure mode "opne" (want open, closed or local)`,
			},
		},
		{
			name: "duplicate policy names, across files too",
			files: map[string]string{
				"a.yaml": `policies:
  - name: api
    rate: 1
    period: 1s
  - name: api
    rate: 2
    period: 1s
`,
				"b.yaml": `policies:
  - name: api
    rate: 3
    period: 1s
`},
			want: []string{
				`a.yaml:5:11: policies[1].name: duplicate policy "api" (already defined at a.yaml:2:5)`,
				`b.yaml:2:11: policies[0].name: duplicate policy "api" (already defined at a.yaml:2:5)`,
			},
		},
		{
			name: "bad route pattern, conflicting routes, bad tier limit, unknown default tier",
			files: map[string]string{"policies.yaml": `policies:
  - name: api
    rate: 10
    period: 1s
    default_tier: gold
    tiers:
      free: {rate: 1}
    routes:
      "GET /a/{id": {rate: 1, period: 1s}
      "GET /b/{x}": {rate: 1, period: 1s}
      "GET /b/{y}": {rate: 1, period: 1s}
`},
			want: []string{
				"policies.yaml:7:13: policies[0].tiers.free.period: is required",
				`policies.yaml:5:19: policies[0].default_tier: names no tier of this policy: "gold"`,
				`policies.yaml:9:7: policies[0].routes["GET /a/{id"]: invalid route pattern: parsing "GET /a/{id": at offset 7: bad wildcard segment (must end with '}')`,
				`policies.yaml:11:7: policies[0].routes["GET /b/{y}"]: invalid route pattern: pattern "GET /b/{y}" conflicts with pattern "GET /b/{x}": GET /b/{y} matches the same requests as GET /b/{x}`,
			},
		},
		{
			name: "identity and key source",
			files: map[string]string{"policies.yaml": `identity:
  trusted_proxies: [10.0.0.0/33, nonsense]
  ipv6_prefix: 129
  client_ip_header: True-Client-IP
policies:
  - name: a
    rate: 1
    period: 1s
    key: {type: ip, header: X-Forwarded-For}
  - name: b
    rate: 1
    period: 1s
    key: cookie
`},
			want: []string{
				`policies.yaml:2:21: identity.trusted_proxies[0]: must be a CIDR such as 10.0.0.0/8 or an address: "10.0.0.0/33"`,
				`policies.yaml:2:34: identity.trusted_proxies[1]: must be a CIDR such as 10.0.0.0/8 or an address: "nonsense"`,
				`policies.yaml:4:21: identity.client_ip_header: must be X-Forwarded-For, X-Real-IP or Forwarded, got "True-Client-IP"`,
				"policies.yaml:3:16: identity.ipv6_prefix: must be between 1 and 128, got 129",
				"policies.yaml:9:29: policies[0].key.header: does not apply to key type ip (the client address comes from the connection and trusted proxies)",
				`policies.yaml:13:10: policies[1].key: unknown key type "cookie" (want ip, user or api_key)`,
			},
		},
		{
			name:  "invalid YAML",
			files: map[string]string{"policies.yaml": "policies:\n  - name: a\n    rate: 1: 2\n"},
			want:  []string{"policies.yaml:3:5: invalid YAML: mapping values are not allowed in this context"},
		},
		{
			// The parser names the line where the list began; the error names the line
			// at fault.
			name:  "invalid YAML: a mis-indented field in a list",
			files: map[string]string{"policies.yaml": "policies:\n  - name: a\n    rate: 10\n    period: second\n   key: ip\n"},
			want:  []string{"policies.yaml:5:4: invalid YAML: did not find expected '-' indicator"},
		},
		{
			name:  "invalid YAML: a field of the second entry out of the list",
			files: map[string]string{"policies.yaml": "policies:\n  - name: a\n    rate: 10\n    period: second\n    key: ip\n  - name: b\n    rate: 10\n  period: second\n"},
			want:  []string{"policies.yaml:8:3: invalid YAML: did not find expected '-' indicator"},
		},
		{
			name:  "invalid YAML: an unterminated quote in a list",
			files: map[string]string{"policies.yaml": "policies:\n  - name: a\n    key: {type: user, header: \"X\n  - name: b\n    rate: 10\n"},
			want:  []string{"policies.yaml:3:5: invalid YAML: found unexpected end of stream"},
		},
		{
			name:  "neither format",
			files: map[string]string{"x.yaml": "hello: world\n"},
			want: []string{
				"x.yaml:1:1: hello: unknown field (known fields: store, admin, identity, overload, policies, quota_domains)",
				"x.yaml:1:1: neither a sluice policy file (store, admin, identity, policies) nor an envoyproxy/ratelimit file (domain)",
			},
		},
		{
			name: "store block",
			files: map[string]string{"store.yaml": `store:
  redis_url: localhost:6379
  deadline: -5ms
  failure_mode: open
  local_share: 0.5
`},
			want: []string{
				"store.yaml:2:14: store.redis_url: must be a redis://, rediss:// or unix:// URL",
				`store.yaml:3:13: store.deadline: must be a positive duration such as 5ms or 1s, got "-5ms"`,
				// store.local_share beside failure_mode open is no error: --failure-mode
				// local, or a policy's own failure_mode local, makes it apply.
			},
		},
		{
			name: "a policy's share beside its own mode",
			files: map[string]string{"p.yaml": `policies:
  - {name: a, rate: 1, period: 1s, failure_mode: closed, expected_nodes: 3}
`},
			want: []string{"p.yaml:2:74: policies[0].expected_nodes: only applies to failure_mode local, not closed"},
		},
		{
			name: "deny cache",
			files: map[string]string{"store.yaml": `store:
  deny_cache: {max_bytes: -1, max_age: 0s, size: 3}
`},
			want: []string{
				"store.yaml:2:44: store.deny_cache.size: unknown field (known fields: max_bytes, max_age)",
				"store.yaml:2:27: store.deny_cache.max_bytes: must not be negative, got -1",
				`store.yaml:2:40: store.deny_cache.max_age: must be a positive duration such as 5ms or 1s, got "0s"`,
			},
		},
		{
			name:  "deny cache on",
			files: map[string]string{"store.yaml": "store:\n  deny_cache: on\n"},
			want:  []string{"store.yaml:2:15: store.deny_cache: must be off or {max_bytes, max_age}; it is on unless turned off"},
		},
		{
			name: "store set in two files",
			files: map[string]string{
				"a.yaml": "store:\n  deadline: 5ms\n",
				"b.yaml": "store:\n  deadline: 7ms\n",
			},
			want: []string{"b.yaml:1:1: store: already set in a.yaml:1:1; set it in one file only"},
		},
		{
			name: "overload set in two files",
			files: map[string]string{
				"a.yaml": "overload:\n  max_limit: 100\n",
				"b.yaml": "overload:\n  max_limit: 200\n",
			},
			want: []string{"b.yaml:1:1: overload: already set in a.yaml:1:1; set it in one file only"},
		},
		{
			name: "overload: bad values",
			files: map[string]string{"overload.yaml": `overload:
  min_limit: 50
  max_limit: 10
  window: 0s
  tolerance: -1
  critical_reserve: 101
  max_wait: soon
  remeasure: never
  default_criticality: urgent
  criticality_header: "X Crit"
  maxlimit: 3
`},
			want: []string{
				"overload.yaml:11:3: overload.maxlimit: unknown field (known fields: min_limit, max_limit, initial_limit, window, min_samples, long_window, tolerance, headroom, remeasure, critical_reserve, default_reserve, max_wait, max_queue, criticality_header, default_criticality)",
				"overload.yaml:5:14: overload.tolerance: must be positive, got -1",
				"overload.yaml:6:21: overload.critical_reserve: must be between 0 and 100, got 101",
				`overload.yaml:4:11: overload.window: must be a positive duration such as 5ms or 1s, got "0s"`,
				`overload.yaml:8:14: overload.remeasure: must be a positive duration such as 500ms, or off, got "never"`,
				`overload.yaml:7:13: overload.max_wait: must be a positive duration such as 500ms, or off, got "soon"`,
				"overload.yaml:2:14: overload.min_limit: 50 exceeds max_limit 10",
				`overload.yaml:10:23: overload.criticality_header: must be an HTTP header name, got "X Crit"`,
				`overload.yaml:9:24: overload.default_criticality: must be critical, default or sheddable, got "urgent"`,
			},
		},
		{
			name: "overload: reserves over 100, headroom over max",
			files: map[string]string{"overload.yaml": `overload:
  max_limit: 10
  headroom: 11
  critical_reserve: 60
  default_reserve: 50
`},
			want: []string{
				"overload.yaml:3:13: overload.headroom: 11 exceeds max_limit 10",
				"overload.yaml:5:20: overload.default_reserve: 50 and critical_reserve 60 exceed 100 percent together",
			},
		},
		{
			name: "criticality of a policy and a route",
			files: map[string]string{"policies.yaml": `policies:
  - name: a
    rate: 5
    period: 1s
    criticality: high
    routes:
      "GET /x":
        rate: 1
        period: 1s
        criticality: 1
`},
			want: []string{
				`policies.yaml:5:18: policies[0].criticality: must be critical, default or sheddable, got "high"`,
				`policies.yaml:10:22: policies[0].routes["GET /x"].criticality: must be critical, default or sheddable, got "1"`,
			},
		},
		// envoyproxy/ratelimit files.
		{
			name: "envoy: unknown key, bad unit",
			files: map[string]string{"envoy.yaml": `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
  - key: b
    ratelimit:
      unit: second
  - key: c
    rate_limit:
      unit: second
`},
			want: []string{
				`envoy.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
				"envoy.yaml:8:5: descriptors[1].ratelimit: unknown field (known fields: key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold)",
			},
		},
		{
			name: "envoy: empty key, duplicate descriptor, unlimited with unit",
			files: map[string]string{"envoy.yaml": `domain: d
descriptors:
  - value: x
  - key: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b
  - key: u
    rate_limit:
      unlimited: true
      unit: second
`},
			want: []string{
				"envoy.yaml:3:5: descriptors[0].key: is required",
				`envoy.yaml:7:5: descriptors[2]: duplicate descriptor key "a" value "b" at this level (first at line 4)`,
				"envoy.yaml:12:13: descriptors[3].rate_limit.unit: must not be set when unlimited is true",
			},
		},
		{
			name: "envoy: replaces itself, requests_per_unit out of range, share_threshold without wildcard",
			files: map[string]string{"envoy.yaml": `domain: d
descriptors:
  - key: a
    rate_limit:
      name: x
      unit: second
      requests_per_unit: 1
      replaces: [{name: x}]
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 4294967296
  - key: c
    share_threshold: true
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces: [{name: nope}]
`},
			want: []string{
				`envoy.yaml:8:25: descriptors[0].rate_limit.replaces[0].name: a rate limit cannot replace itself ("x")`,
				"envoy.yaml:12:26: descriptors[1].rate_limit.requests_per_unit: must be between 0 and 4294967295, got 4294967296",
				`envoy.yaml:14:22: descriptors[2].share_threshold: applies only to wildcard values (ending in '*'), not ""`,
			},
		},
		{
			name: "envoy: duplicate domain across files, empty domain",
			files: map[string]string{
				"a.yaml": "domain: d\ndescriptors: []\n",
				"b.yaml": "domain: d\n",
				"c.yaml": "domain: \"\"\n",
			},
			want: []string{
				`b.yaml:1:9: domain: duplicate domain "d" (already defined at a.yaml:1:9)`,
				"c.yaml:1:1: domain: must not be empty",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := loadErrors(t, tt.files)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestValidateErrorWrapsErrInvalidLimit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.yaml", "policies:\n  - name: a\n    algorithm: sliding_log\n    rate: 2000000\n    period: 1h\n")
	_, err := Load(dir)
	if !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("err %v does not wrap sluice.ErrInvalidLimit", err)
	}
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Pos.Line != 4 || es[0].Field != "policies[0].rate" {
		t.Fatalf("errors %#v", es)
	}
}

// A policy's local_share is not checked against store.failure_mode: the service's
// --failure-mode comes between them, and can make the policy's share apply.
func TestInheritedLocalShareAccepted(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "p.yaml", `store:
  failure_mode: closed
policies:
  - name: a
    rate: 1
    period: 1s
    expected_nodes: 4
`)
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := cfg.Policy("a")
	if got := cfg.Failure(p, sluice.FailInherit); got != (sluice.Failure{Mode: sluice.FailClosed, Share: 0.25}) {
		t.Errorf("without the flag: %+v, want closed from the store block", got)
	}
	if got := cfg.Failure(p, sluice.FailLocal); got != (sluice.Failure{Mode: sluice.FailLocal, Share: 0.25}) {
		t.Errorf("with --failure-mode local: %+v, want local at the policy's 1/4", got)
	}
}

// Files written for the reference implementation's YAML 1.1 library use yes/no booleans.
func TestYAML11Booleans(t *testing.T) {
	d := loadDomain(t, `
domain: b
descriptors:
  - key: a
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: u
    rate_limit: {unlimited: yes}
`)
	checkMatches(t, d, []Descriptor{e("a", "1"), e("u", "1")}, []want{
		{status: Limited, fullKey: "b.a", rate: 1, period: 1e9, alg: sluice.FixedWindow, shadow: true},
		{status: Unlimited, fullKey: "b.u"},
	})
}
