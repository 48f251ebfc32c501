package httplimit

import (
	"math/bits"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
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

// ceilSeconds rounds d up to whole seconds; d <= 0 gives 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Quota returns the q and w parameters that describe l in RateLimit-Policy: q units per w
// seconds. For the window algorithms, and for a bucket whose Burst is at most its Rate,
// that is Rate per Period. A bucket whose Burst exceeds its Rate is advertised as its
// bucket: Burst units per Burst·Period/Rate (the time to refill it, rounded up to a whole
// µs), which states the same sustained rate and keeps the RateLimit field's r (up to
// Burst) within q.
//
// When the window is a whole number of seconds it is used as is. Otherwise w is rounded up
// to whole seconds (the draft allows no sub-second window) and q = floor(units·w/window),
// so the advertised rate never exceeds the real one. q is capped at RFC 9651's largest
// Integer.
//
// A Concurrency limit has no window: q is its Rate and w is 0 (RateLimit-Policy then
// carries qu="concurrent-requests" and no w). A calendar limit has no Period; see
// DecisionQuota.
func Quota(l sluice.Limit) (q, w int64) {
	if l.Algorithm == sluice.Concurrency && l.Rate > 0 {
		return min(l.Rate, sfv.MaxInteger), 0
	}
	if !l.Calendar.IsZero() && l.Rate > 0 {
		start, end := l.Calendar.Bounds(time.Now())
		return min(l.Rate, sfv.MaxInteger), ceilSeconds(end.Sub(start))
	}
	if l.Period <= 0 || l.Rate <= 0 {
		return 0, 0
	}
	units, window := l.Rate, l.Period
	switch l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		if b := l.EffectiveBurst(); b > l.Rate {
			units, window = b, l.FillTime()
		}
	}
	if window%time.Second == 0 {
		return min(units, sfv.MaxInteger), int64(window / time.Second)
	}
	w = ceilSeconds(window)
	hi, lo := bits.Mul64(uint64(units), uint64(w)*uint64(time.Second))
	if hi >= uint64(window) {
		return sfv.MaxInteger, w
	}
	quo, _ := bits.Div64(hi, lo, uint64(window))
	return int64(min(quo, sfv.MaxInteger)), w
}

// DecisionQuota is Quota for the limit d decided. For a calendar limit, q is Rate and w
// the length in seconds of the calendar period the decision fell in (d.Window, rounded
// up): a 23-, 24- or 25-hour day, a 28- to 31-day month (an hour less or more across a
// DST change), a 365- or 366-day year. w thus varies from period to period, and q/w is
// that period's average rate. A decision no store made (a failure mode) has no Window;
// the period holding the local clock's now is advertised then.
func DecisionQuota(d sluice.Decision) (q, w int64) {
	if !d.Limit.Calendar.IsZero() && d.Window > 0 {
		return min(d.Limit.Rate, sfv.MaxInteger), ceilSeconds(d.Window)
	}
	return Quota(d.Limit)
}

// effectiveWindow is the t parameter for d, in seconds: the time until the denied cost
// would pass when there is one, else the time until the state is back to full.
func effectiveWindow(d sluice.Decision) int64 {
	if d.RetryAfter > 0 {
		return ceilSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.ResetAfter)
}

// policyItems caches, per policy name and Limit (at most one per policy, tier or
// override of the configuration), the serialized RateLimit-Policy item without a
// partition key and the policy name as an RFC 9651 String, the start of its RateLimit
// item.
type policyItems struct{ m sync.Map } // policyItemKey -> *policyItem

type policyItemKey struct {
	name   string
	limit  sluice.Limit
	window time.Duration // a calendar period's length (DecisionQuota)
}

type policyItem struct {
	policy string // the RateLimit-Policy item, without pk
	name   string // the name as an sf-string
}

// item returns d's cached serializations.
func (c *policyItems) item(d *PolicyDecision) *policyItem {
	k := policyItemKey{d.Policy, d.Limit, d.Window}
	if v, ok := c.m.Load(k); ok {
		return v.(*policyItem)
	}
	it := &policyItem{name: string(sfv.AppendString(nil, d.Policy))}
	it.policy = string(appendPolicyParams([]byte(it.name), d))
	v, _ := c.m.LoadOrStore(k, it)
	return v.(*policyItem)
}

// appendPolicyParams appends the parameters of d's RateLimit-Policy item but pk.
func appendPolicyParams(b []byte, d *PolicyDecision) []byte {
	q, w := DecisionQuota(d.Decision)
	b = sfv.AppendIntParam(b, "q", q)
	if d.Limit.Algorithm == sluice.Concurrency {
		// draft-ietf-httpapi-ratelimit-headers: the quota unit of a limit on requests
		// in flight; a window does not apply.
		return append(b, `;qu="concurrent-requests"`...)
	}
	return sfv.AppendIntParam(b, "w", w)
}

// Advertised reports whether d's counts belong in the RateLimit field. A decision that
// failed open (sluice.PathOpen: the store was down) is not: its policy applies but its
// quota is unknown, and r=0 would tell well-behaved clients to stop while every request
// is allowed. Its policy is still named in RateLimit-Policy.
func Advertised(d sluice.Decision) bool { return d.Path != sluice.PathOpen }

// writeHeaders sets RateLimit-Policy, RateLimit, the legacy fields when asked for, and
// Retry-After when retryAfter > 0 (seconds; the response is a refusal). An empty decision
// list sets nothing. Each field is an RFC 9651 List, one member per decision, serialized
// as §4.1.1 does (members joined with ", "); RateLimit-Policy members without a
// partition key come from cache.
func writeHeaders(h http.Header, cache *policyItems, ds []PolicyDecision, retryAfter int64, legacy bool) {
	if len(ds) == 0 {
		if retryAfter > 0 {
			h[HeaderRetryAfter] = []string{strconv.FormatInt(retryAfter, 10)}
		}
		return
	}
	// Both fields are built in one buffer, and set from one string and one slice.
	var buf [256]byte
	b := buf[:0]
	var found [4]*policyItem // the items of the first decisions, for the second loop
	for i := range ds {
		d := &ds[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		it := cache.item(d)
		if i < len(found) {
			found[i] = it
		}
		b = append(b, it.policy...)
		if d.partitionKey {
			b = sfv.AppendBytesParam(b, "pk", d.Identity.String())
		}
	}
	policyEnd := len(b)
	tightest := -1
	var tightT int64
	for i := range ds {
		d := &ds[i]
		if !Advertised(d.Decision) {
			continue
		}
		t := effectiveWindow(d.Decision)
		if retryAfter > 0 {
			// Retry-After must not point earlier than the end of any effective window
			// (draft-ietf-httpapi-ratelimit-headers-11 §6).
			t = min(t, retryAfter)
		}
		if len(b) > policyEnd {
			b = append(b, ", "...)
		}
		it := found[min(i, len(found)-1)]
		if i >= len(found) {
			it = cache.item(d)
		}
		b = append(b, it.name...)
		b = sfv.AppendIntParam(b, "r", d.Remaining)
		b = sfv.AppendIntParam(b, "t", t)
		if d.partitionKey {
			b = sfv.AppendBytesParam(b, "pk", d.Identity.String())
		}
		// The legacy fields describe one policy: the one that denied with the longest
		// wait, else the one with the least remaining (ties: the longest window).
		if tightest < 0 || tighter(d, &ds[tightest], t, tightT) {
			tightest, tightT = i, t
		}
	}
	all := string(b)
	vals := make([]string, 2, 2+3*btoi(legacy)+btoi(retryAfter > 0))
	vals[0] = all[:policyEnd]
	h[HeaderRateLimitPolicy] = vals[0:1:1]
	if len(all) > policyEnd {
		vals[1] = all[policyEnd:]
		h[HeaderRateLimit] = vals[1:2:2]
	}
	set := func(name string, v int64) {
		vals = append(vals, strconv.FormatInt(v, 10))
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if legacy && tightest >= 0 {
		d := &ds[tightest]
		q, _ := DecisionQuota(d.Decision)
		set(HeaderXRateLimitLimit, q)
		set(HeaderXRateLimitRemaining, d.Remaining)
		set(HeaderXRateLimitReset, tightT)
	}
	if retryAfter > 0 {
		set(HeaderRetryAfter, retryAfter)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func tighter(a, b *PolicyDecision, at, bt int64) bool {
	if a.blocks() != b.blocks() {
		return a.blocks()
	}
	if a.blocks() {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return at > bt
}
