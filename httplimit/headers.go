package httplimit

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/internal/sfv"
)

// Header field names, in Go's canonical form (http.Header.Get finds them by any case).
const (
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderRateLimit       = "Ratelimit"
	HeaderRetryAfter      = "Retry-After"

	HeaderXRateLimitLimit     = "X-Ratelimit-Limit"
	HeaderXRateLimitRemaining = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset     = "X-Ratelimit-Reset"
)

// policyItems caches, per policy name and Limit (at most one per policy, tier or
// override of the configuration), the serialized RateLimit-Policy item without a
// partition key and the policy name as an RFC 9651 String, the start of its RateLimit
// item.
type policyItems struct{ m sync.Map } // policyItemKey -> *policyItem

type policyItemKey struct {
	name   string
	limit  sluice.Limit
	window time.Duration // a calendar period's length
}

type policyItem struct {
	policy string // the RateLimit-Policy item, without pk
	name   string // the name as an sf-string
}

// member returns d's member of the fields, its serializations from the cache.
func (c *policyItems) member(d *PolicyDecision) ratelimitheader.Member {
	m := ratelimitheader.Member{Name: d.Policy, Decision: &d.Decision, Blocks: d.blocks}
	if d.partitionKey {
		m.PK = d.Identity.String()
	}
	k := policyItemKey{d.Policy, d.Limit, d.Window}
	v, ok := c.m.Load(k)
	if !ok {
		it := &policyItem{name: string(sfv.AppendString(nil, d.Policy))}
		m.Quoted = it.name
		it.policy = string(ratelimitheader.AppendPolicy(nil, &m))
		v, _ = c.m.LoadOrStore(k, it)
	}
	it := v.(*policyItem)
	m.Quoted, m.Policy = it.name, it.policy
	return m
}

// writeHeaders sets the rate limit fields describing ds (see package ratelimitheader):
// RateLimit-Policy, RateLimit, the legacy fields when asked for, and Retry-After in a
// refusal. An empty decision list sets Retry-After only.
func writeHeaders(h http.Header, cache *policyItems, ds []PolicyDecision, r ratelimitheader.Refusal, legacy bool) {
	var few [4]ratelimitheader.Member
	ms := few[:0]
	for i := range ds {
		ms = append(ms, cache.member(&ds[i]))
	}
	f := ratelimitheader.Write(nil, ms, r, legacy)
	// One slice holds every value; each field gets a full-capacity window of it.
	vals := [...]string{f.Policy, f.RateLimit, f.XLimit, f.XRemaining, f.XReset, f.RetryAfter}
	names := [...]string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderXRateLimitLimit, HeaderXRateLimitRemaining, HeaderXRateLimitReset, HeaderRetryAfter}
	var set []string
	for i, v := range vals {
		if v == "" {
			continue
		}
		if set == nil {
			set = make([]string, 0, len(vals))
		}
		set = append(set, v)
		h[names[i]] = set[len(set)-1 : len(set) : len(set)]
	}
}
