package server

import (
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/evaluator"
)

// TestSFString: any name gives a String that a structured-field parser reads back, with
// bytes outside printable ASCII written as %XX.
func TestSFString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"edge.remote_address", "edge.remote_address"},
		{`a"b\c`, `a"b\c`},
		{"caf\xc3\xa9", "caf%C3%A9"},
		{"tab\there\n", "tab%09here%0A"},
		{"", ""},
	} {
		b := string(appendSFString(nil, tc.in))
		it, err := httpsfv.UnmarshalItem([]string{b})
		if err != nil {
			t.Fatalf("%q -> %s: %v", tc.in, b, err)
		}
		if got := it.Value.(string); got != tc.want {
			t.Errorf("%q -> %q, want %q", tc.in, got, tc.want)
		}
	}
}

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
