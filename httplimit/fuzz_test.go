package httplimit

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/internal/sfv"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/store"
)

// FuzzHeaders formats the RateLimit-Policy and RateLimit fields for two decisions of any
// policy names, limits, counts, times and partition keys, and parses them back with an
// RFC 9651 parser: a name that can be a String always serializes, every member round-trips
// (name, q and w from Quota, r the Remaining capped at the largest Integer, t the effective
// window capped at Retry-After, pk the identity's bytes), and nothing is negative.
func FuzzHeaders(f *testing.F) {
	f.Add("per-ip", uint8(0), int64(10), int64(1), int64(7), int64(0), int64(800), false, "", int64(0), "daily", true)
	f.Add("a\"b\\c", uint8(3), int64(1000), int64(3600), int64(0), int64(5000), int64(9000), true, "api_key:abc", int64(5), "x", false)
	f.Add("", uint8(5), int64(1<<20), int64(86400*365), int64(1<<60), int64(0), int64(1), true, "\x00\xff", int64(1<<40), "é", true)
	f.Fuzz(func(t *testing.T, name string, alg uint8, rate, periodS, remaining, retryMS, resetMS int64, pk bool, id string, retryAfter int64, name2 string, legacy bool) {
		algs := store.Algorithms()
		abs := func(v int64) int64 {
			if v < 0 {
				return -(v + 1)
			}
			return v
		}
		limit := sluice.Limit{Algorithm: algs[int(alg)%len(algs)], Rate: 1 + abs(rate)%1e12,
			Period: time.Duration(1+abs(periodS)%(100*365*86400)) * time.Second}
		if limit.Validate() != nil {
			return // outside the target's domain: nothing to check
		}
		d := sluice.Decision{Allowed: retryMS%2 == 0, Limit: limit, Remaining: abs(remaining),
			RetryAfter: time.Duration(abs(retryMS)%(1e12)) * time.Millisecond,
			ResetAfter: time.Duration(abs(resetMS)%(1e12)) * time.Millisecond, Path: sluice.PathStore}
		if d.Allowed {
			d.RetryAfter = 0
		}
		ds := []PolicyDecision{
			{Policy: name, Identity: keys.Identity{Kind: keys.User, ID: id}, Decision: d, partitionKey: pk},
			{Policy: name2, Decision: sluice.Decision{Allowed: true, Limit: sluice.PerMinute(60), Remaining: 59, ResetAfter: time.Second, Path: sluice.PathStore}},
		}
		ra := abs(retryAfter) % 1e9
		h := http.Header{}
		if !sfv.ValidString(name) || !sfv.ValidString(name2) {
			return // New refuses names that are not structured-field Strings
		}
		writeHeaders(h, &policyItems{}, ds, ratelimitheader.Refusal{Refused: ra > 0, Wait: time.Duration(ra) * time.Second}, legacy)
		pol := parseList(t, h, HeaderRateLimitPolicy)
		lim := parseList(t, h, HeaderRateLimit)
		if len(pol) != 2 || len(lim) != 2 {
			t.Fatalf("%d policy and %d limit members, want 2 each", len(pol), len(lim))
		}
		for i, pd := range ds {
			q, w := ratelimitheader.Quota(pd.Limit)
			tt := ratelimitheader.Seconds(ratelimitheader.Wait(&pd.Decision))
			if ra > 0 {
				tt = min(tt, ra)
			}
			p, l := pol[i], lim[i]
			if p.name != pd.Policy || l.name != pd.Policy {
				t.Fatalf("member %d names %q and %q, want %q", i, p.name, l.name, pd.Policy)
			}
			if p.params["q"] != q || p.params["w"] != w {
				t.Fatalf("%q: q=%v w=%v, want %d, %d", pd.Policy, p.params["q"], p.params["w"], q, w)
			}
			if l.params["r"] != min(pd.Remaining, sfv.MaxInteger) || l.params["t"] != tt {
				t.Fatalf("%q: r=%v t=%v, want %d, %d", pd.Policy, l.params["r"], l.params["t"], min(pd.Remaining, sfv.MaxInteger), tt)
			}
			for _, v := range []any{p.params["q"], p.params["w"], l.params["r"], l.params["t"]} {
				if n, ok := v.(int64); !ok || n < 0 {
					t.Fatalf("%q: parameter %#v is not a non-negative Integer", pd.Policy, v)
				}
			}
			if got, has := l.params["pk"]; has != pd.partitionKey || has && !bytes.Equal(got.([]byte), []byte(pd.Identity.String())) {
				t.Fatalf("%q: pk %#v (present %v), want %q", pd.Policy, got, has, pd.Identity.String())
			}
		}
	})
}
