package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const quotaPolicyFile = `
quota_domains:
  - domain: edge
    buckets:
      - name: per-user
        bucket_id: {user: "*"}
        rate: 100
        period: 1s
      - name: alice
        bucket_id: {user: alice}
        rate: 7
        period: 1m
        burst: 3
        reporting_interval: 2s
        assignment_ttl: 10s
        no_assignment: deny
        expired_assignment: reuse_last
      - name: team
        bucket_id: {user: "team-*", env: prod}
        rate: 50
        period: 1s
      - bucket_id: {route: health}
        unlimited: true
`

const quotaEnvoyFile = `
domain: mesh
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
quota_buckets:
  - name: all
    bucket_id: {name: "*"}
    rate: 0
    period: 1s
`

func TestQuotaDomains(t *testing.T) {
	c, err := Parse(File{"q.yaml", []byte(quotaPolicyFile)}, File{"e.yaml", []byte(quotaEnvoyFile)})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.QuotaDomains) != 2 || c.QuotaDomains[0].Name != "edge" || c.QuotaDomains[1].Name != "mesh" {
		t.Fatalf("quota domains %v", c.QuotaDomains)
	}
	if _, ok := c.Domain("mesh"); !ok {
		t.Fatal("the envoy file's descriptors are lost")
	}
	edge, _ := c.QuotaDomain("edge")
	for _, tc := range []struct {
		id   map[string]string
		want string // rule name, "" for no match
	}{
		{map[string]string{"user": "bob"}, "per-user"},
		{map[string]string{"user": "alice"}, "alice"}, // exact beats "*" though written later
		{map[string]string{"user": "team-a", "env": "prod"}, "team"},
		{map[string]string{"user": "other", "env": "prod"}, ""},
		{map[string]string{"user": "team-a", "env": "dev"}, ""},
		{map[string]string{"user": "bob", "extra": "x"}, ""}, // keys must be exactly the rule's
		{map[string]string{"route": "health"}, "route=health"},
	} {
		m, ok := edge.Match(tc.id)
		got := ""
		if ok {
			got = m.Bucket.Name
		}
		if got != tc.want {
			t.Errorf("Match(%v) = %q, want %q", tc.id, got, tc.want)
		}
	}
	a, _ := edge.Match(map[string]string{"user": "alice"})
	b := a.Bucket
	if b.Rate != 7 || b.Period != time.Minute || b.Burst != 3 || b.ReportingInterval != 2*time.Second ||
		b.TTL != 10*time.Second || b.NoAssignment != QuotaDeny || b.Expired != QuotaReuseLast {
		t.Errorf("alice %+v", b)
	}
	u, _ := edge.Match(map[string]string{"user": "bob"})
	if b := u.Bucket; b.Burst != 10 || b.TTL != 3*time.Second || b.NoAssignment != QuotaAllow || b.Expired != QuotaDeny {
		t.Errorf("defaults %+v", b)
	}
	u2, _ := edge.Match(map[string]string{"user": "carol"})
	if u.Key == u2.Key || len(u.Key) != 32 || strings.Contains(u.Key, "bob") {
		t.Errorf("keys %q %q: want a distinct digest per id", u.Key, u2.Key)
	}
	dump, err := c.Dump()
	if err != nil || !strings.Contains(string(dump), `"quota_domains"`) || !strings.Contains(string(dump), `"expired_assignment": "reuse_last"`) {
		t.Errorf("dump %s %v", dump, err)
	}
	mesh, _ := c.QuotaDomain("mesh")
	if m, ok := mesh.Match(map[string]string{"name": "x"}); !ok || m.Bucket.Rate != 0 {
		t.Errorf("mesh %+v %v", m, ok)
	}
}

func TestQuotaErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"bad fields", map[string]string{"x.yaml": `
quota_domains:
  - domain: d
    buckets:
      - bucket_id: {}
        rate: -1
        period: 0s
        expired_assignment: sometimes
        no_assignment: reuse_last
`}, []string{
			"x.yaml:6:15: quota_domains[0].buckets[0].rate: must not be negative, got -1",
			"x.yaml:7:17: quota_domains[0].buckets[0].period: must be positive, got \"0s\"",
			"x.yaml:8:29: quota_domains[0].buckets[0].expired_assignment: must be allow, deny or reuse_last, got \"sometimes\"",
			"x.yaml:9:24: quota_domains[0].buckets[0].no_assignment: must be allow or deny, got \"reuse_last\"",
			"x.yaml:5:9: quota_domains[0].buckets[0].bucket_id: is required: a mapping of bucket id keys to values (\"*\" for any)",
		}},
		{"ttl not above the interval", map[string]string{"x.yaml": `
quota_domains:
  - domain: d
    buckets:
      - {bucket_id: {a: b}, rate: 1, period: 1s, reporting_interval: 5s, assignment_ttl: 5s}
`}, []string{
			"x.yaml:5:90: quota_domains[0].buckets[0].assignment_ttl: must be longer than reporting_interval (5s), or every assignment lapses before it is renewed",
		}},
		{"duplicate pattern", map[string]string{"x.yaml": `
quota_domains:
  - domain: d
    buckets:
      - {bucket_id: {a: "*"}, rate: 1, period: 1s}
      - {bucket_id: {a: "*"}, rate: 2, period: 1s}
`}, []string{
			"x.yaml:6:9: quota_domains[0].buckets[1].bucket_id: duplicate bucket_id (first at line 5): the later rule could never match",
		}},
		{"duplicate across formats", map[string]string{
			"a.yaml": "quota_domains: [{domain: d, buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]}]\n",
			"b.yaml": "domain: d\nquota_buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]\n",
		}, []string{
			"b.yaml:1:9: domain: duplicate quota domain \"d\" (already defined at a.yaml:1:26)",
		}},
		{"duplicate in one file and across files", map[string]string{
			"a.yaml": "domain: d\nquota_buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]\n",
			"b.yaml": "quota_domains: [{domain: d, buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]}, {domain: e, buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]}, {domain: e, buckets: [{bucket_id: {a: b}, rate: 1, period: 1s}]}]\n",
		}, []string{
			"b.yaml:1:26: quota_domains[0].domain: duplicate quota domain \"d\" (already defined at a.yaml:1:9)",
			"b.yaml:1:158: quota_domains[2].domain: duplicate quota domain \"e\" (already defined at b.yaml:1:92)",
		}},
		{"strict fields in envoy files", map[string]string{
			"b.yaml": "domain: d\nquota_buckets: [{bucket_id: {a: b}, rate: 1, period: 1s, unit: second}]\n",
		}, []string{
			"b.yaml:2:58: quota_buckets[0].unit: unknown field (known fields: " + strings.Join(quotaBucketFields, ", ") + ")",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := loadErrors(t, tc.files)
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestValidBucketID(t *testing.T) {
	long := strings.Repeat("x", MaxBucketIDBytes+1)
	many := map[string]string{}
	for i := range MaxBucketIDEntries + 1 {
		many[string(rune('a'+i))] = "v"
	}
	for _, id := range []map[string]string{nil, {}, {"": "v"}, {long: "v"}, {"k": long}, {"k": "\xff"}, many} {
		if ValidBucketID(id) == nil {
			t.Errorf("ValidBucketID(%.40v) = nil, want an error", id)
		}
	}
	if err := ValidBucketID(map[string]string{"k": ""}); err != nil {
		t.Error(err)
	}
}
