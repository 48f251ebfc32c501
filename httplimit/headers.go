package httplimit

import (
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
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

// maxSFInteger is the largest Integer RFC 9651 can carry (15 digits).
const maxSFInteger = 999_999_999_999_999

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
		return min(l.Rate, maxSFInteger), 0
	}
	if !l.Calendar.IsZero() && l.Rate > 0 {
		start, end := l.Calendar.Bounds(time.Now())
		return min(l.Rate, maxSFInteger), ceilSeconds(end.Sub(start))
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
		return min(units, maxSFInteger), int64(window / time.Second)
	}
	w = ceilSeconds(window)
	hi, lo := bits.Mul64(uint64(units), uint64(w)*uint64(time.Second))
	if hi >= uint64(window) {
		return maxSFInteger, w
	}
	quo, _ := bits.Div64(hi, lo, uint64(window))
	return int64(min(quo, maxSFInteger)), w
}

// DecisionQuota is Quota for the limit d decided. For a calendar limit, q is Rate and w
// the length in seconds of the calendar period the decision fell in (d.Window, rounded
// up): a 23-, 24- or 25-hour day, a 28- to 31-day month (an hour less or more across a
// DST change), a 365- or 366-day year. w thus varies from period to period, and q/w is
// that period's average rate. A decision no store made (a failure mode) has no Window;
// the period holding the local clock's now is advertised then.
func DecisionQuota(d sluice.Decision) (q, w int64) {
	if !d.Limit.Calendar.IsZero() && d.Window > 0 {
		return min(d.Limit.Rate, maxSFInteger), ceilSeconds(d.Window)
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

// policyItems caches serialized RateLimit-Policy items without a partition key, which
// depend only on the policy's name and Limit: at most one per (policy, tier or override)
// of the configuration.
type policyItems struct{ m sync.Map } // policyItemKey -> string

type policyItemKey struct {
	name   string
	limit  sluice.Limit
	window time.Duration // a calendar period's length (DecisionQuota)
}

// item returns the RFC 9651 serialization of d's RateLimit-Policy item.
func (c *policyItems) item(d *PolicyDecision) (string, error) {
	k := policyItemKey{d.Policy, d.Limit, d.Window}
	if !d.partitionKey {
		if v, ok := c.m.Load(k); ok {
			return v.(string), nil
		}
	}
	q, w := DecisionQuota(d.Decision)
	pi := httpsfv.NewItem(d.Policy)
	pi.Params.Add("q", q)
	if d.Limit.Algorithm == sluice.Concurrency {
		// draft-ietf-httpapi-ratelimit-headers: the quota unit of a limit on requests
		// in flight; a window does not apply.
		pi.Params.Add("qu", "concurrent-requests")
	} else {
		pi.Params.Add("w", w)
	}
	if d.partitionKey {
		pi.Params.Add("pk", []byte(d.Identity.String()))
	}
	v, err := httpsfv.Marshal(httpsfv.List{pi})
	if err == nil && !d.partitionKey {
		c.m.Store(k, v)
	}
	return v, err
}

// Advertised reports whether d's counts belong in the RateLimit field. A decision that
// failed open (sluice.PathOpen: the store was down) is not: its policy applies but its
// quota is unknown, and r=0 would tell well-behaved clients to stop while every request
// is allowed. Its policy is still named in RateLimit-Policy.
func Advertised(d sluice.Decision) bool { return d.Path != sluice.PathOpen }

// writeHeaders sets RateLimit-Policy, RateLimit, the legacy fields when asked for, and
// Retry-After when retryAfter > 0 (seconds; the response is a refusal). An empty decision
// list sets nothing. Each field is an RFC 9651 List serialized by httpsfv, one member per
// decision; RateLimit-Policy members come from cache, joined with ", " as RFC 9651 §4.1.1
// serializes a List.
func writeHeaders(h http.Header, cache *policyItems, ds []PolicyDecision, retryAfter int64, legacy bool) error {
	if len(ds) == 0 {
		if retryAfter > 0 {
			h.Set(HeaderRetryAfter, strconv.FormatInt(retryAfter, 10))
		}
		return nil
	}
	var policies strings.Builder
	limits := make(httpsfv.List, 0, len(ds))
	tightest := -1
	var tightT int64
	for i := range ds {
		d := &ds[i]
		pi, err := cache.item(d)
		if err != nil {
			return err
		}
		if i > 0 {
			policies.WriteString(", ")
		}
		policies.WriteString(pi)
		if !Advertised(d.Decision) {
			continue
		}
		t := effectiveWindow(d.Decision)
		if retryAfter > 0 {
			// Retry-After must not point earlier than the end of any effective window
			// (draft-ietf-httpapi-ratelimit-headers-11 §6).
			t = min(t, retryAfter)
		}
		li := httpsfv.NewItem(d.Policy)
		li.Params.Add("r", min(d.Remaining, maxSFInteger))
		li.Params.Add("t", t)
		if d.partitionKey {
			li.Params.Add("pk", []byte(d.Identity.String()))
		}
		limits = append(limits, li)
		// The legacy fields describe one policy: the one that denied with the longest
		// wait, else the one with the least remaining (ties: the longest window).
		if tightest < 0 || tighter(d, &ds[tightest], t, tightT) {
			tightest, tightT = i, t
		}
	}
	h.Set(HeaderRateLimitPolicy, policies.String())
	if len(limits) > 0 {
		lv, err := httpsfv.Marshal(limits)
		if err != nil {
			return err
		}
		h.Set(HeaderRateLimit, lv)
	}
	if legacy && tightest >= 0 {
		d := &ds[tightest]
		q, _ := DecisionQuota(d.Decision)
		h.Set(HeaderXRateLimitLimit, strconv.FormatInt(q, 10))
		h.Set(HeaderXRateLimitRemaining, strconv.FormatInt(d.Remaining, 10))
		h.Set(HeaderXRateLimitReset, strconv.FormatInt(tightT, 10))
	}
	if retryAfter > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(retryAfter, 10))
	}
	return nil
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
