package server

import (
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
)

// rateLimitHeaders calls set with each of the RateLimit-Policy, RateLimit and Retry-After
// fields (as httplimit sends them) that the decided items have, one member per limit; a
// requests_per_unit 0 rule is a limit of q=0, and shadow items are listed only with
// shadow. The values take their memory from dst's capacity when they fit
// (ratelimitheader.Write).
func rateLimitHeaders(dst []byte, items []item, r ratelimitheader.Refusal, shadow bool,
	set func(name, value string)) {
	var few [8]ratelimitheader.Member
	ms := few[:0]
	for i := range items {
		it := &items[i]
		if it.Shadow && !shadow {
			continue // a client obeying a shadow limit would stop though nothing is enforced
		}
		if it.status != config.Blocked && (it.status != config.Limited || !it.Decided) {
			continue
		}
		m := ratelimitheader.Member{Name: it.name, Decision: &it.Decision, Blocks: it.Blocks()}
		if e := it.envoy; e != nil {
			m.Quoted = e.quoted
			if e.policy != "" && it.Decision.Limit == e.limit && it.Decision.Window == 0 {
				m.Policy = e.policy // the rule's member, written at load
			}
		}
		ms = append(ms, m)
	}
	f := ratelimitheader.Write(dst, ms, r, false)
	for _, kv := range [...][2]string{{"RateLimit-Policy", f.Policy}, {"RateLimit", f.RateLimit},
		{"Retry-After", f.RetryAfter}} {
		if kv[1] != "" {
			set(kv[0], kv[1])
		}
	}
}

// ceilMillis rounds d up to whole milliseconds; d <= 0 gives 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
