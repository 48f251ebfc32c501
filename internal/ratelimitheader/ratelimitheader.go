// Package ratelimitheader writes the rate limit fields of an HTTP answer, for every front
// end that sends them: package httplimit (and so `sluice proxy`), the JSON API and the
// Envoy RLS answers of package server.
//
// The fields are those of draft-ietf-httpapi-ratelimit-headers-11, each an RFC 9651 List
// with one member per limit, in the caller's order, members joined with ", ":
//
//   - RateLimit-Policy: the limit's name as a String with q and w from [DecisionQuota]
//     (a Concurrency limit has qu="concurrent-requests" and no w; a limit of Rate 0, which
//     allows nothing, has q=0 and its window), and pk when the member has a partition key
//     (its bytes as a Byte Sequence).
//   - RateLimit: the name with r, the Remaining, and t, [Wait] in whole seconds rounded up,
//     capped at Retry-After in a refusal (§6: Retry-After must not point earlier than any
//     effective window), and pk. A decision that failed open (sluice.PathOpen), whose
//     quota is unknown, is left out; its limit is still named in RateLimit-Policy.
//   - Retry-After, in a refusal only: the refusal's wait in whole seconds rounded up, at
//     least 1, so that a client never retries at once.
//   - With Fields.Legacy, X-RateLimit-Limit, -Remaining and -Reset for one limit: the one
//     that blocks the request with the longest wait, else the one with the least
//     remaining (ties: the longest t). Its q, r and t.
//
// Integers are clamped to RFC 9651's largest Integer.
package ratelimitheader

import (
	"math/bits"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/sfv"
)

// Seconds is d in whole seconds, rounded up (delay-seconds); d <= 0 gives 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Wait is what a client is told to wait for d: its RetryAfter when positive (the time
// until the denied cost would pass), else its ResetAfter (the time until the state is
// back to full). It is the t parameter of RateLimit and Envoy's duration_until_reset.
func Wait(d *sluice.Decision) time.Duration {
	if d.RetryAfter > 0 {
		return d.RetryAfter
	}
	return d.ResetAfter
}

// Quota returns the q and w parameters that describe l in RateLimit-Policy: q units per w
// seconds. For the window algorithms, and for a bucket whose Burst is at most its Rate,
// that is Rate per Period. A bucket whose Burst exceeds its Rate is advertised as its
// bucket: Burst units per Burst·Period/Rate (the time to refill it, rounded up to a whole
// µs), which states the same sustained rate and keeps the RateLimit field's r (up to
// Burst) within q. A limit of Rate 0 (it allows nothing) has q=0 and its Period.
//
// When the window is a whole number of seconds it is used as is. Otherwise w is rounded up
// to whole seconds (the draft allows no sub-second window) and q = floor(units·w/window),
// so the advertised rate never exceeds the real one. q is capped at RFC 9651's largest
// Integer.
//
// A Concurrency limit has no window: q is its Rate and w is 0. A calendar limit has no
// Period; see DecisionQuota.
func Quota(l sluice.Limit) (q, w int64) {
	if l.Algorithm == sluice.Concurrency && l.Rate > 0 {
		return min(l.Rate, sfv.MaxInteger), 0
	}
	if !l.Calendar.IsZero() && l.Rate > 0 {
		start, end := l.Calendar.Bounds(time.Now())
		return min(l.Rate, sfv.MaxInteger), Seconds(end.Sub(start))
	}
	if l.Period <= 0 || l.Rate < 0 {
		return 0, 0
	}
	units, window := l.Rate, l.Period
	switch l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		if b := l.MaxCost(); b > l.Rate {
			units, window = b, fillTime(b, l)
		}
	}
	if window%time.Second == 0 {
		return min(units, sfv.MaxInteger), int64(window / time.Second)
	}
	w = Seconds(window)
	hi, lo := bits.Mul64(uint64(units), uint64(w)*uint64(time.Second))
	if hi >= uint64(window) {
		return sfv.MaxInteger, w
	}
	quo, _ := bits.Div64(hi, lo, uint64(window))
	return int64(min(quo, sfv.MaxInteger)), w
}

// fillTime is the time an empty bucket of depth b under l takes to hold b again:
// b·Period/Rate, rounded up to a whole microsecond; 0 beyond what Limit.Validate accepts.
func fillTime(b int64, l sluice.Limit) time.Duration {
	if hi, _ := bits.Mul64(uint64(b), uint64(l.Period.Microseconds())); hi >= uint64(l.Rate) {
		return 0
	}
	return time.Duration(algo.MulDivCeil(b, l.Period.Microseconds(), l.Rate)) * time.Microsecond
}

// DecisionQuota is Quota for the limit d decided. For a calendar limit, q is Rate and w
// the length in seconds of the calendar period the decision fell in (d.Window, rounded
// up), so w varies from period to period; without a Window (a failure mode decided), the
// period holding the local clock's now.
func DecisionQuota(d *sluice.Decision) (q, w int64) {
	if !d.Limit.Calendar.IsZero() && d.Window > 0 {
		return min(d.Limit.Rate, sfv.MaxInteger), Seconds(d.Window)
	}
	return Quota(d.Limit)
}

// Member is one limit the fields describe.
type Member struct {
	// Name names the limit. Quoted, when not "", is Name already serialized as a String.
	Name, Quoted string
	// Policy, when not "", is the member's RateLimit-Policy item without pk, already
	// serialized by AppendPolicy (a caller caches it per limit).
	Policy string
	// PK, when not "", is the partition key, sent as a Byte Sequence.
	PK string
	// Decision is the limit's decision.
	Decision *sluice.Decision
	// Blocks reports whether this limit denies the request (it chooses the legacy fields'
	// limit).
	Blocks bool
}

// AppendPolicy appends m's RateLimit-Policy item without pk: Quoted (or Name as a
// String), then q and w, or q and qu for a Concurrency limit.
func AppendPolicy(b []byte, m *Member) []byte {
	b = appendName(b, m)
	q, w := DecisionQuota(m.Decision)
	b = sfv.AppendIntParam(b, "q", q)
	if m.Decision.Limit.Algorithm == sluice.Concurrency {
		// The draft's quota unit of a limit on requests in flight; no window applies.
		return append(b, `;qu="concurrent-requests"`...)
	}
	return sfv.AppendIntParam(b, "w", w)
}

func appendName(b []byte, m *Member) []byte {
	if m.Quoted != "" {
		return append(b, m.Quoted...)
	}
	return sfv.AppendString(b, m.Name)
}

// Fields are the serialized field values; each is "" when the field is not sent.
type Fields struct {
	Policy, RateLimit, RetryAfter string
	// XLimit, XRemaining and XReset are the legacy fields, with Legacy only.
	XLimit, XRemaining, XReset string
}

// Refusal says whether the answer refuses the request and how long the client waits.
type Refusal struct {
	Refused bool
	Wait    time.Duration
}

// Write returns the fields describing ms (see the package doc). An empty ms gives only
// Retry-After, in a refusal. The values take their memory from dst when they fit in its
// capacity, and are then valid only while the caller does not write to dst's memory;
// otherwise they take one allocation. A Policy field that is one member's cached Policy
// is that string, not a copy.
func Write(dst []byte, ms []Member, r Refusal, legacy bool) Fields {
	var buf [256]byte
	b := buf[:0]
	var ends [6]int // the end in b of each field, in the order of Fields; 0 when absent
	onlyPolicy := ""
	for i := range ms {
		m := &ms[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		if m.Policy != "" {
			b = append(b, m.Policy...)
		} else {
			b = AppendPolicy(b, m)
		}
		if m.PK != "" {
			b = sfv.AppendBytesParam(b, "pk", m.PK)
		}
		if len(ms) == 1 && m.PK == "" {
			onlyPolicy = m.Policy
		}
	}
	ends[0] = len(b)
	raSec := int64(0)
	if r.Refused {
		raSec = max(1, Seconds(r.Wait))
	}
	tightest, tightT := -1, int64(0)
	start := len(b)
	for i := range ms {
		m := &ms[i]
		if m.Decision.Path == sluice.PathOpen {
			continue
		}
		t := Seconds(Wait(m.Decision))
		if raSec > 0 {
			t = min(t, raSec)
		}
		if len(b) > start {
			b = append(b, ", "...)
		}
		b = appendName(b, m)
		b = sfv.AppendIntParam(b, "r", m.Decision.Remaining)
		b = sfv.AppendIntParam(b, "t", t)
		if m.PK != "" {
			b = sfv.AppendBytesParam(b, "pk", m.PK)
		}
		if tightest < 0 || tighter(m, &ms[tightest], t, tightT) {
			tightest, tightT = i, t
		}
	}
	if len(b) > start {
		ends[1] = len(b)
	}
	if raSec > 0 {
		b = strconv.AppendInt(b, raSec, 10)
		ends[2] = len(b)
	}
	if legacy && tightest >= 0 {
		d := ms[tightest].Decision
		q, _ := DecisionQuota(d)
		for j, v := range [3]int64{q, d.Remaining, tightT} {
			b = strconv.AppendInt(b, min(v, sfv.MaxInteger), 10)
			ends[3+j] = len(b)
		}
	}
	if len(b) == 0 {
		return Fields{}
	}
	skip := len(onlyPolicy) // the member is not copied: Policy is its string
	if cap(dst) < len(b)-skip {
		dst = make([]byte, 0, len(b)-skip) // one copy into dst's memory, or one allocation
	}
	text := append(dst[:0], b[skip:]...)
	s := unsafe.String(unsafe.SliceData(text), len(text))
	var vals [6]string
	from := skip
	for i, end := range ends {
		if end > 0 {
			vals[i] = s[from-skip : end-skip]
			from = end
		}
	}
	if onlyPolicy != "" {
		vals[0] = onlyPolicy
	}
	return Fields{Policy: vals[0], RateLimit: vals[1], RetryAfter: vals[2], XLimit: vals[3], XRemaining: vals[4], XReset: vals[5]}
}

// tighter reports whether a, with t parameter at, describes the request more tightly than
// b, with bt: a blocking limit before one that does not, the longer wait among blocking
// ones, else the least remaining, then the longer t.
func tighter(a, b *Member, at, bt int64) bool {
	if a.Blocks != b.Blocks {
		return a.Blocks
	}
	if a.Blocks {
		return a.Decision.RetryAfter > b.Decision.RetryAfter
	}
	if a.Decision.Remaining != b.Decision.Remaining {
		return a.Decision.Remaining < b.Decision.Remaining
	}
	return at > bt
}
