package server

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/sfv"
)

// rateLimitHeaders returns the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) describing the decided items, and Retry-After
// in delay-seconds when the request is denied (ra > 0). They are the same fields the
// httplimit middleware sends: one Item per limit, a String naming it, with q and w in the
// policy field and r and t in the RateLimit field; t is capped at Retry-After in a refusal.
// Items the store did not decide (no limit, unlimited, replaced) are not listed, and an
// item whose decision failed open is listed in the policy field only (its quota is
// unknown), so limit may be empty when policy is not; a
// requests_per_unit 0 rule is listed with q=0.
//
// The fields are appended to dst and cut out of it: when they fit in dst's capacity they
// take no allocation, and the caller must then not write to dst's memory while the
// strings are in use. A policy field that is one rule's member written at load is that
// string, not a copy.
func rateLimitHeaders(dst []byte, items []item, ra time.Duration, shadow bool) (policy, limit, retry string) {
	// Both fields are built on the stack for a few limits, then copied to dst at once.
	var pbuf, lbuf [128]byte
	pb, lb := pbuf[:0], lbuf[:0]
	members, onlyOwn := 0, "" // policy members; the one, if it is a rule's own
	raSec := ceilSeconds(ra)
	for i := range items {
		it := &items[i]
		if it.Shadow && !shadow {
			continue // a client obeying a shadow limit would stop though nothing is enforced
		}
		var q, w, r, t int64
		own := false // RateLimit-Policy is the rule's member written at load
		switch {
		case it.status == config.Limited && it.Decided:
			if own = it.ownPolicy(); !own {
				q, w = httplimit.DecisionQuota(it.Decision)
			}
			r = it.Decision.Remaining
			if it.Decision.RetryAfter > 0 {
				t = ceilSeconds(it.Decision.RetryAfter)
			} else {
				t = ceilSeconds(it.Decision.ResetAfter)
			}
		case it.status == config.Blocked:
			w = ceilSeconds(it.Decision.Limit.Period)
			if it.Decision.Window > 0 {
				w = ceilSeconds(it.Decision.Window) // a calendar period
			}
			t = ceilSeconds(it.Decision.RetryAfter)
		default:
			continue
		}
		if raSec > 0 {
			t = min(t, raSec)
		}
		quoted := ""
		if e := it.envoy; e != nil {
			quoted = e.quoted
		}
		switch {
		case it.status == config.Limited && it.Decision.Limit.Algorithm == sluice.Concurrency:
			// The draft's quota unit for requests in flight; no window applies.
			pb = append(appendMember1(pb, quoted, it.name, ";q=", min(q, maxSFInteger)), `;qu="concurrent-requests"`...)
		case own:
			pb = appendName(pb, it.envoy.policy, "")
			if members == 0 {
				onlyOwn = it.envoy.policy
			}
		default:
			pb = appendMember(pb, quoted, it.name, ";q=", min(q, maxSFInteger), ";w=", w)
		}
		members++
		if httplimit.Advertised(it.Decision) {
			lb = appendMember(lb, quoted, it.name, ";r=", min(r, maxSFInteger), ";t=", t)
		}
	}
	used := dst[:0] // what the fields took of dst
	switch {
	case len(pb) == 0:
	case members == 1 && onlyOwn != "":
		policy = onlyOwn
		if len(lb) > 0 {
			used = append(used, lb...)
			limit = unsafe.String(unsafe.SliceData(used), len(used))
		}
	default:
		used = append(append(used, pb...), lb...)
		text := unsafe.String(unsafe.SliceData(used), len(used))
		policy, limit = text[:len(pb)], text[len(pb):]
	}
	if raSec > 0 {
		if rest := used[len(used):]; cap(rest) >= maxIntLen {
			r := strconv.AppendInt(rest, raSec, 10)
			retry = unsafe.String(unsafe.SliceData(r), len(r))
		} else {
			retry = strconv.FormatInt(raSec, 10)
		}
	}
	return policy, limit, retry
}

// ownPolicy reports whether a decided item's RateLimit-Policy member is its rule's,
// written at load (envoyRule.policy).
func (it *item) ownPolicy() bool {
	e := it.envoy
	return e != nil && e.policy != "" && it.Decision.Limit == e.limit && it.Decision.Window == 0
}

// appendName starts a List member in the field b: the separator when b holds one, then
// name as a String, or written, when not "", which is that String (or a whole member)
// already written.
func appendName(b []byte, written, name string) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	if written != "" {
		return append(b, written...)
	}
	return sfv.AppendString(b, name)
}

// appendMember1 appends one List member to the field b: name as a String (see
// appendName) with one Integer parameter k1.
func appendMember1(b []byte, written, name, k1 string, v1 int64) []byte {
	b = append(appendName(b, written, name), k1...)
	return strconv.AppendInt(b, v1, 10)
}

// appendMember appends one List member to the field b: name as a String (see
// appendName) with two Integer parameters, k1 and k2 (each written with its ';' and '=').
func appendMember(b []byte, written, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	b = append(appendMember1(b, written, name, k1, v1), k2...)
	return strconv.AppendInt(b, v2, 10)
}

// maxSFInteger is the largest Integer RFC 9651 can carry.
const maxSFInteger = sfv.MaxInteger

// ceilSeconds rounds d up to whole seconds; d <= 0 gives 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilMillis rounds d up to whole milliseconds; d <= 0 gives 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// maxIntLen is the longest decimal int64.
const maxIntLen = len("-9223372036854775808")
