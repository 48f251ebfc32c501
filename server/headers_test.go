package server

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/evaluator"
)

// TestHeadersFailOpen: a limit whose decision failed open is in RateLimit-Policy but not in
// RateLimit (its quota is unknown: r=0 would tell clients to stop while all pass).
func TestHeadersFailOpen(t *testing.T) {
	lim := sluice.PerSecond(10)
	store := item{name: "a", status: config.Limited, Item: evaluator.Item{Request: sluice.Request{Limit: lim}, Decided: true,
		Decision: sluice.Decision{Allowed: true, Limit: lim, Remaining: 9, ResetAfter: time.Second}}}
	open := item{name: "b", status: config.Limited, Item: evaluator.Item{Request: sluice.Request{Limit: lim}, Decided: true,
		Decision: sluice.Decision{Allowed: true, Limit: lim, Path: sluice.PathOpen}}}

	p, l, _ := rateLimitHeaders(nil, []item{open, store}, 0, false)
	if p != `"b";q=10;w=1, "a";q=10;w=1` || l != `"a";r=9;t=1` {
		t.Errorf("open then store: policy %q, limit %q", p, l)
	}
	p, l, _ = rateLimitHeaders(nil, []item{open}, 0, false)
	if p != `"b";q=10;w=1` || l != "" {
		t.Errorf("open only: policy %q, limit %q", p, l)
	}
}
