package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
)

// TestHeadersFailOpen: a limit whose decision failed open is in RateLimit-Policy but not in
// RateLimit (its quota is unknown: r=0 would tell clients to stop while all pass).
func TestHeadersFailOpen(t *testing.T) {
	lim := sluice.PerSecond(10)
	store := item{name: "a", status: config.Limited, Item: evaluator.Item{Request: sluice.Request{Limit: lim}, Decided: true,
		Decision: sluice.Decision{Allowed: true, Limit: lim, Remaining: 9, ResetAfter: time.Second}}}
	open := item{name: "b", status: config.Limited, Item: evaluator.Item{Request: sluice.Request{Limit: lim}, Decided: true,
		Decision: sluice.Decision{Allowed: true, Limit: lim, Path: sluice.PathOpen}}}

	fields := func(items ...item) (p, l string) {
		h := http.Header{}
		rateLimitHeaders(nil, items, ratelimitheader.Refusal{}, false, h.Set)
		return h.Get("RateLimit-Policy"), h.Get("RateLimit")
	}
	p, l := fields(open, store)
	if p != `"b";q=10;w=1, "a";q=10;w=1` || l != `"a";r=9;t=1` {
		t.Errorf("open then store: policy %q, limit %q", p, l)
	}
	p, l = fields(open)
	if p != `"b";q=10;w=1` || l != "" {
		t.Errorf("open only: policy %q, limit %q", p, l)
	}
}

// TestRLSRefusalHasRetryAfter: an Envoy answer OVER_LIMIT because a descriptor's cost
// exceeds what its limit can ever allow (no wait would let it pass) still carries
// Retry-After, of 1 second, as every refusal of every front end does: a client told
// nothing would retry at once.
func TestRLSRefusalHasRetryAfter(t *testing.T) {
	cfg := parseConfig(t, configFile("edge.yaml", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"))
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, cfg, Options{RLSHeaders: RLSHeaders{IETF: true}})
			resp, err := r.rls.ShouldRateLimit(context.Background(), edgeReq(withHits(desc("k", "v"), 4)))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode != over {
				t.Fatalf("code %v, want OVER_LIMIT", resp.OverallCode)
			}
			got := map[string]string{}
			for _, h := range resp.ResponseHeadersToAdd {
				got[h.Key] = h.Value
			}
			if got["Retry-After"] != "1" || got["RateLimit-Policy"] != `"edge.k";q=3;w=60` {
				t.Errorf("headers %v, want RateLimit-Policy q=3;w=60 and Retry-After 1", got)
			}
		})
	}
}

// TestRLSResetIsRateLimitT: an Envoy answer's duration_until_reset and its RateLimit t
// tell the same wait, allowed (the time until the quota is whole) and denied (the time
// until the request would pass), for a rule with no fixed window (gcra), with the IETF
// headers on.
func TestRLSResetIsRateLimitT(t *testing.T) {
	cfg := parseConfig(t, configFile("edge.yaml", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra}\n"))
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) {
			r, _ := newServer(t, k, cfg, Options{RLSHeaders: RLSHeaders{IETF: true}})
			for i, hits := range []uint64{1, 2, 1} {
				resp, err := r.rls.ShouldRateLimit(context.Background(), edgeReq(withHits(desc("k", "v"), hits)))
				if err != nil {
					t.Fatal(err)
				}
				var tParam string
				for _, h := range resp.ResponseHeadersToAdd {
					if h.Key == "RateLimit" {
						_, tParam, _ = strings.Cut(h.Value, ";t=")
					}
				}
				d := resp.Statuses[0].DurationUntilReset.AsDuration()
				if want := strconv.FormatInt(ratelimitheader.Seconds(d), 10); tParam != want || d <= 0 {
					t.Errorf("call %d (%v): duration_until_reset %v, RateLimit t=%s, want t=%s", i, resp.OverallCode, d, tParam, want)
				}
			}
		})
	}
}
