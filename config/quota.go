package config

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// QuotaDomain is one domain of the Rate Limit Quota Service (RLQS): the bucket rules of
// a policy file's quota_domains entry or of an envoyproxy/ratelimit file's quota_buckets.
type QuotaDomain struct {
	Name string
	// Buckets are the bucket rules in file order.
	Buckets []*QuotaBucket
	// Pos is where the domain is named.
	Pos Position

	bySig     map[string][]*QuotaBucket // key set signature -> rules, most specific first
	nameNode  *yaml.Node
	nameField string
}

// QuotaBehavior is what a proxy does with a bucket before its first assignment or after
// its assignment expired; docs/envoy.md maps it to the filter's settings.
type QuotaBehavior uint8

const (
	// QuotaAllow: blanket_rule ALLOW_ALL.
	QuotaAllow QuotaBehavior = iota
	// QuotaDeny: blanket_rule DENY_ALL.
	QuotaDeny
	// QuotaReuseLast: keep enforcing the expired assignment (expired only).
	QuotaReuseLast
)

var quotaBehaviorNames = [...]string{"allow", "deny", "reuse_last"}

func (b QuotaBehavior) String() string { return enumName(quotaBehaviorNames[:], b, "quota_behavior") }

// Defaults of a quota bucket.
const (
	DefaultReportingInterval = time.Second
	DefaultTTLIntervals      = 3 // reporting intervals: one lost report does not expire
)

// Bounds of bucket ids, as reported and as configured: larger ids are malformed.
const (
	MaxBucketIDEntries = 16
	MaxBucketIDBytes   = 256 // per key and per value
)

// MaxQuotaRate is the largest rate of a quota bucket (tokens_per_fill is a uint32).
const MaxQuotaRate = math.MaxUint32

// QuotaBucket is one bucket rule: the bucket ids it matches and the global limit of each,
// divided among the proxies reporting on it.
type QuotaBucket struct {
	// Name names the rule in metrics and logs ("" in the file: the id pattern).
	Name string
	// ID is the bucket id pattern, sorted by key; values match as an [Entry]'s. An id
	// matches when it has exactly these keys and every value matches.
	ID []Entry
	// Rate per Period is the global limit of each matching id; 0 denies every request,
	// Unlimited allows every one.
	Rate      int64
	Period    time.Duration
	Unlimited bool
	// Burst is the most all proxies together admit at once beyond the rate (default
	// Rate/10, at least 1).
	Burst int64
	// ReportingInterval is the filters' reporting_interval; TTL the assignments' time to
	// live (default DefaultTTLIntervals intervals).
	ReportingInterval time.Duration
	TTL               time.Duration
	// NoAssignment and Expired default to allow and deny.
	NoAssignment QuotaBehavior
	Expired      QuotaBehavior
	// Pos is where the rule starts.
	Pos Position

	exact, prefix int // specificity: exact values, total prefix length
}

// QuotaMatch is the rule a reported bucket id matched and the key its state is kept
// under: a digest of the domain and the id, so raw values never reach the store.
type QuotaMatch struct {
	Bucket *QuotaBucket
	Key    string
}

// QuotaDomain returns the RLQS domain with that name.
func (c *Config) QuotaDomain(name string) (*QuotaDomain, bool) {
	d, ok := c.quotaDomains[name]
	return d, ok
}

// ValidBucketID reports why a reported bucket id is malformed (empty, too many entries, a
// key or value too long or not UTF-8), or nil.
func ValidBucketID(id map[string]string) error {
	switch {
	case len(id) == 0:
		return fmt.Errorf("empty bucket id")
	case len(id) > MaxBucketIDEntries:
		return fmt.Errorf("bucket id has %d entries, more than %d", len(id), MaxBucketIDEntries)
	}
	for k, v := range id {
		if k == "" || len(k) > MaxBucketIDBytes || len(v) > MaxBucketIDBytes || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("bucket id entry %.32q: keys must be 1 to %d bytes of UTF-8, values at most %d", k, MaxBucketIDBytes, MaxBucketIDBytes)
		}
	}
	return nil
}

// Match returns the rule for a valid bucket id: among the rules with exactly its keys,
// the first that matches by specificity (more exact values, longer prefixes, file order).
func (d *QuotaDomain) Match(id map[string]string) (QuotaMatch, bool) {
	keys := slices.Sorted(maps.Keys(id))
	for _, b := range d.bySig[strings.Join(keys, "\x00")] {
		if b.matches(id) {
			return QuotaMatch{Bucket: b, Key: quotaKey(d.Name, keys, id)}, true
		}
	}
	return QuotaMatch{}, false
}

func (b *QuotaBucket) matches(id map[string]string) bool {
	for _, e := range b.ID {
		v := id[e.Key]
		switch {
		case e.Value == "" || e.Value == "*":
		case strings.HasSuffix(e.Value, "*"):
			if !strings.HasPrefix(v, e.Value[:len(e.Value)-1]) {
				return false
			}
		case v != e.Value:
			return false
		}
	}
	return true
}

// quotaKey digests the domain and the sorted id, each part length-prefixed.
func quotaKey(domain string, keys []string, id map[string]string) string {
	n := 8 + len(domain)
	for _, k := range keys {
		n += 16 + len(k) + len(id[k])
	}
	b := make([]byte, 0, n)
	part := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	part(domain)
	for _, k := range keys {
		part(k)
		part(id[k])
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

var quotaBucketFields = []string{
	"name", "bucket_id", "rate", "period", "unlimited", "burst",
	"reporting_interval", "assignment_ttl", "no_assignment", "expired_assignment",
}

// quotaDomain decodes the bucket rules of o's field list for the domain name, named by
// o's field domain.
func (d *decoder) quotaDomain(name string, o *object, list string) *QuotaDomain {
	nameNode, _ := o.get("domain")
	qd := &QuotaDomain{Name: name, Pos: d.pos(nameNode), nameNode: nameNode, nameField: o.field("domain"), bySig: map[string][]*QuotaBucket{}}
	lv, _ := o.get(list)
	path := o.field(list)
	seen := map[string]*QuotaBucket{}
	for i, item := range d.seq(lv, path) {
		b := d.quotaBucket(item, index(path, i))
		if b == nil {
			continue
		}
		pat := fmt.Sprintf("%q", b.ID) // quoted: one text per pattern
		if prev := seen[pat]; prev != nil {
			d.errorf(item, index(path, i)+".bucket_id", "duplicate bucket_id (first at line %d): the later rule could never match", prev.Pos.Line)
			continue
		}
		seen[pat] = b
		qd.Buckets = append(qd.Buckets, b)
		keys := make([]string, len(b.ID))
		for j, e := range b.ID {
			keys[j] = e.Key
		}
		sig := strings.Join(keys, "\x00")
		qd.bySig[sig] = append(qd.bySig[sig], b)
	}
	for _, rules := range qd.bySig {
		slices.SortStableFunc(rules, func(a, b *QuotaBucket) int {
			return cmp.Or(b.exact-a.exact, b.prefix-a.prefix)
		})
	}
	return qd
}

func (d *decoder) quotaBucket(n *yaml.Node, path string) *QuotaBucket {
	o := d.object(n, path, quotaBucketFields...)
	if o == nil {
		return nil
	}
	before := len(d.errs)
	b := &QuotaBucket{Pos: d.pos(n), ReportingInterval: DefaultReportingInterval, Expired: QuotaDeny}
	read(o, "name", &b.Name, d.str)
	if v, ok := o.get("bucket_id"); ok {
		field := o.field("bucket_id")
		for _, kv := range d.pairs(v, field) {
			val, _ := d.str(kv.val, join(field, kv.key.Value))
			if kv.key.Value == "" || len(kv.key.Value) > MaxBucketIDBytes || len(val) > MaxBucketIDBytes {
				d.errorf(kv.key, join(field, kv.key.Value), "keys must be 1 to %d bytes, values at most %d", MaxBucketIDBytes, MaxBucketIDBytes)
				continue
			}
			b.ID = append(b.ID, Entry{Key: kv.key.Value, Value: val})
			switch {
			case val == "" || val == "*":
			case strings.HasSuffix(val, "*"):
				b.prefix += len(val) - 1
			default:
				b.exact++
			}
		}
		if len(b.ID) > MaxBucketIDEntries {
			d.errorf(v, field, "has %d keys, more than %d", len(b.ID), MaxBucketIDEntries)
		}
		slices.SortFunc(b.ID, func(x, y Entry) int { return strings.Compare(x.Key, y.Key) })
	}
	if len(b.ID) == 0 {
		d.errorf(n, o.field("bucket_id"), "is required: a mapping of bucket id keys to values (\"*\" for any)")
	}
	if b.Name == "" {
		var parts []string
		for _, e := range b.ID {
			parts = append(parts, e.Key+"="+e.Value)
		}
		b.Name = strings.Join(parts, ",")
	}
	read(o, "unlimited", &b.Unlimited, d.boolean)
	if b.Unlimited {
		for _, f := range []string{"rate", "period", "burst"} {
			if v, ok := o.get(f); ok {
				d.errorf(v, o.field(f), "must not be set when unlimited is true")
			}
		}
	} else {
		if !read(o, "rate", &b.Rate, intIn[int64](d, 0, MaxQuotaRate)) {
			d.errorf(n, o.field("rate"), "is required (0 denies every request)")
		}
		if !read(o, "period", &b.Period, d.periodIn(time.Millisecond, 0)) {
			d.errorf(n, o.field("period"), "is required")
		}
		if !read(o, "burst", &b.Burst, intIn[int64](d, 1, MaxQuotaRate)) {
			b.Burst = max(1, b.Rate/10)
		}
	}
	if v, ok := o.get("reporting_interval"); ok {
		if iv, ok := d.duration(v, o.field("reporting_interval")); ok {
			if iv < 100*time.Millisecond {
				d.errorf(v, o.field("reporting_interval"), "must be at least 100ms (the filter's minimum)")
			}
			b.ReportingInterval = iv
		}
	}
	b.TTL = DefaultTTLIntervals * b.ReportingInterval
	if v, ok := o.get("assignment_ttl"); ok {
		if ttl, ok := d.duration(v, o.field("assignment_ttl")); ok {
			if ttl <= b.ReportingInterval {
				d.errorf(v, o.field("assignment_ttl"), "must be longer than reporting_interval (%v), or every assignment lapses before it is renewed", b.ReportingInterval)
			}
			b.TTL = ttl
		}
	}
	// behavior reads a field that may name the first n QuotaBehaviors.
	behavior := func(field string, dst *QuotaBehavior, n int) {
		if v, ok := o.get(field); ok {
			s, _ := d.str(v, o.field(field))
			names := quotaBehaviorNames[:n]
			if i := slices.Index(names, s); i >= 0 {
				*dst = QuotaBehavior(i)
			} else {
				d.errorf(v, o.field(field), "must be %s or %s, got %q", strings.Join(names[:n-1], ", "), names[n-1], s)
			}
		}
	}
	behavior("no_assignment", &b.NoAssignment, 2)
	behavior("expired_assignment", &b.Expired, 3)
	if len(d.errs) != before {
		return nil
	}
	return b
}

// quotaDomains decodes a sluice policy file's quota_domains: [{domain, buckets}].
func (d *decoder) quotaDomains(n *yaml.Node) []*QuotaDomain {
	var out []*QuotaDomain
	for i, item := range d.seq(n, "quota_domains") {
		o := d.object(item, index("quota_domains", i), "domain", "buckets")
		if o == nil {
			continue
		}
		var name string
		read(o, "domain", &name, d.str)
		if name == "" {
			d.errorf(item, o.field("domain"), "is required")
			continue
		}
		out = append(out, d.quotaDomain(name, o, "buckets")) // names are checked by the merger
	}
	return out
}
