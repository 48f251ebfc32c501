package ratelimitheader

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/sfv"
	"github.com/sluicehq/sluice/store"
)

func TestQuota(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		q, w  int64
	}{
		{sluice.PerSecond(10), 10, 1},
		{sluice.PerMinute(100), 100, 60},
		{sluice.PerDay(1000), 1000, 86400},
		{sluice.Limit{Rate: 5, Period: 100 * time.Millisecond}, 50, 1},
		{sluice.Limit{Rate: 3, Period: 1500 * time.Millisecond}, 4, 2}, // 3 per 1.5s = 4 per 2s
		{sluice.Limit{Rate: 7, Period: 2500 * time.Millisecond}, 8, 3}, // floor(8.4)
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: store.MaxRate, Period: time.Microsecond}, sfv.MaxInteger, 1},
		{sluice.Limit{}, 0, 0},
		// Rate 0 allows nothing (an Envoy rule's requests_per_unit 0): q=0 over its window.
		{sluice.Limit{Algorithm: sluice.FixedWindow, Period: time.Minute}, 0, 60},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Period: 1500 * time.Millisecond}, 0, 2},
	}
	for _, tt := range tests {
		q, w := Quota(tt.limit)
		if q != tt.q || w != tt.w {
			t.Errorf("Quota(%v) = q=%d w=%d, want q=%d w=%d", tt.limit, q, w, tt.q, tt.w)
		}
	}
}

// TestWrite: the fields of every front end, in the cases where the writers of httplimit
// and server once differed: pk and the legacy fields, q=0 for a limit that allows
// nothing, and a refusal's Retry-After of at least 1 s.
func TestWrite(t *testing.T) {
	perMin := sluice.PerMinute(10)
	allowed := sluice.Decision{Allowed: true, Limit: perMin, Remaining: 7, ResetAfter: 18 * time.Second}
	denied := sluice.Decision{Limit: perMin, RetryAfter: 4500 * time.Millisecond, ResetAfter: time.Minute}
	nothing := sluice.Decision{Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Period: time.Minute},
		RetryAfter: 40 * time.Second, ResetAfter: 40 * time.Second}
	open := sluice.Decision{Allowed: true, Limit: perMin, Path: sluice.PathOpen}
	conc := sluice.Decision{Allowed: true, Limit: sluice.Limit{Algorithm: sluice.Concurrency, Rate: 4, Lease: time.Minute}, Remaining: 3}
	tooBig := sluice.Decision{Limit: perMin, Remaining: 10}
	tests := []struct {
		name   string
		ms     []Member
		r      Refusal
		legacy bool
		want   Fields
	}{
		{"allowed", []Member{{Name: "a", Decision: &allowed}}, Refusal{}, false,
			Fields{Policy: `"a";q=10;w=60`, RateLimit: `"a";r=7;t=18`}},
		{"partition key", []Member{{Name: "a", PK: "id", Decision: &allowed}}, Refusal{}, false,
			Fields{Policy: `"a";q=10;w=60;pk=:aWQ=:`, RateLimit: `"a";r=7;t=18;pk=:aWQ=:`}},
		{"denied, t capped at Retry-After", []Member{{Name: "a", Decision: &allowed}, {Name: "b", Blocks: true, Decision: &denied}},
			Refusal{Refused: true, Wait: denied.RetryAfter}, true,
			Fields{Policy: `"a";q=10;w=60, "b";q=10;w=60`, RateLimit: `"a";r=7;t=5, "b";r=0;t=5`, RetryAfter: "5",
				XLimit: "10", XRemaining: "0", XReset: "5"}},
		{"legacy: the least remaining when none blocks", []Member{{Name: "a", Decision: &allowed}, {Name: "c", Decision: &conc}}, Refusal{}, true,
			Fields{Policy: `"a";q=10;w=60, "c";q=4;qu="concurrent-requests"`, RateLimit: `"a";r=7;t=18, "c";r=3;t=0`,
				XLimit: "4", XRemaining: "3", XReset: "0"}},
		{"a limit that allows nothing", []Member{{Name: "z", Blocks: true, Decision: &nothing}}, Refusal{Refused: true, Wait: nothing.RetryAfter}, false,
			Fields{Policy: `"z";q=0;w=60`, RateLimit: `"z";r=0;t=40`, RetryAfter: "40"}},
		{"a refusal no wait ends", []Member{{Name: "a", Blocks: true, Decision: &tooBig}}, Refusal{Refused: true}, false,
			Fields{Policy: `"a";q=10;w=60`, RateLimit: `"a";r=10;t=0`, RetryAfter: "1"}},
		{"failed open: policy only", []Member{{Name: "a", Decision: &open}}, Refusal{}, false,
			Fields{Policy: `"a";q=10;w=60`}},
		{"no member, refused", nil, Refusal{Refused: true, Wait: time.Millisecond}, false, Fields{RetryAfter: "1"}},
		{"nothing", nil, Refusal{}, true, Fields{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Write(nil, tt.ms, tt.r, tt.legacy); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			// A caller's cached serializations give the same fields.
			cached := make([]Member, len(tt.ms))
			for i, m := range tt.ms {
				m.Quoted = string(sfv.AppendString(nil, m.Name))
				m.Policy = string(AppendPolicy(nil, &m))
				cached[i] = m
			}
			if got := Write(make([]byte, 0, 512), cached, tt.r, tt.legacy); got != tt.want {
				t.Errorf("cached: got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestWriteIntoDst: fields that fit in dst take no allocation.
func TestWriteIntoDst(t *testing.T) {
	d := sluice.Decision{Limit: sluice.PerMinute(10), RetryAfter: time.Second}
	m := Member{Name: "a", Decision: &d, Blocks: true}
	m.Policy = string(AppendPolicy(nil, &m))
	ms := []Member{m}
	dst := make([]byte, 0, 128)
	var f Fields
	if n := testing.AllocsPerRun(100, func() { f = Write(dst, ms, Refusal{Refused: true, Wait: time.Second}, true) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
	if f.Policy != m.Policy || f.RateLimit != `"a";r=0;t=1` || f.RetryAfter != "1" || f.XReset != "1" {
		t.Errorf("fields %+v", f)
	}
}

// TestFillTime: b·Period/Rate, rounded up to a µs; 0 for a limit with no rate.
func TestFillTime(t *testing.T) {
	tests := []struct {
		l    sluice.Limit
		want time.Duration
	}{
		{sluice.PerSecond(10), time.Second},
		{sluice.PerSecond(10).WithBurst(25), 2500 * time.Millisecond},
		{sluice.PerSecond(3), time.Second},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Second, Burst: 1}, 333334 * time.Microsecond},
		{sluice.Limit{Burst: 5}, 0},
	}
	for _, tt := range tests {
		if got := fillTime(tt.l.MaxCost(), tt.l); got != tt.want {
			t.Errorf("fillTime(%v) = %v, want %v", tt.l, got, tt.want)
		}
	}
}
