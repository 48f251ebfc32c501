package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

// rateLimitHeaders returns the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) describing the decided items, and Retry-After
// in delay-seconds when the request is denied (ra > 0). They are the same fields the
// httplimit middleware sends: one Item per limit, a String naming it, with q and w in the
// policy field and r and t in the RateLimit field; t is capped at Retry-After in a refusal.
// Items the store did not decide (no limit, unlimited, replaced) are not listed; a
// requests_per_unit 0 rule is listed with q=0.
func rateLimitHeaders(items []item, ra time.Duration) (policy, limit, retry string) {
	var pb, lb strings.Builder
	pb.Grow(64 * len(items))
	lb.Grow(64 * len(items))
	raSec := ceilSeconds(ra)
	for i := range items {
		it := &items[i]
		var q, w, r, t int64
		switch {
		case it.status == config.Limited && it.decided:
			q, w = httplimit.Quota(it.dec.Limit)
			r = it.dec.Remaining
			if it.dec.RetryAfter > 0 {
				t = ceilSeconds(it.dec.RetryAfter)
			} else {
				t = ceilSeconds(it.dec.ResetAfter)
			}
		case it.status == config.Blocked:
			w = ceilSeconds(it.dec.Limit.Period)
			t = ceilSeconds(it.dec.RetryAfter)
		default:
			continue
		}
		if raSec > 0 {
			t = min(t, raSec)
		}
		if pb.Len() > 0 {
			pb.WriteString(", ")
			lb.WriteString(", ")
		}
		sfString(&pb, it.name)
		pb.WriteString(";q=")
		pb.WriteString(strconv.FormatInt(min(q, maxSFInteger), 10))
		pb.WriteString(";w=")
		pb.WriteString(strconv.FormatInt(w, 10))
		sfString(&lb, it.name)
		lb.WriteString(";r=")
		lb.WriteString(strconv.FormatInt(min(r, maxSFInteger), 10))
		lb.WriteString(";t=")
		lb.WriteString(strconv.FormatInt(t, 10))
	}
	if raSec > 0 {
		retry = strconv.FormatInt(raSec, 10)
	}
	return pb.String(), lb.String(), retry
}

// maxSFInteger is the largest Integer RFC 9651 can carry.
const maxSFInteger = 999_999_999_999_999

// sfString writes s as an RFC 9651 String: quoted, with '"' and '\' escaped. Bytes a
// String cannot hold (outside printable ASCII) are written as %XX, so any descriptor
// value gives a valid field.
func sfString(b *strings.Builder, s string) {
	b.WriteByte('"')
	from := 0 // s[from:i] is plain and not yet written
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[from:i])
		from = i + 1
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte("0123456789ABCDEF"[c>>4])
		b.WriteByte("0123456789ABCDEF"[c&15])
	}
	b.WriteString(s[from:])
	b.WriteByte('"')
}

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
