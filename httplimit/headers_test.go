package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/store"
)

func TestHeadersParseAsStructuredFields(t *testing.T) {
	hasher, err := keys.NewHasher([]byte("0123456789abcdef0123456789abcdef"), keys.Base64URL)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		name string
		q, w int64
		r, t int64
		pk   string // "" for none
	}
	severalWithShadow := []Policy{
		{Name: "per-ip", Limit: sluice.PerSecond(10)},
		{Name: "per-key", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour},
			Key: ByAPIKey(hasher, Header("X-API-Key")), PartitionKey: true},
		{Name: "shadow", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: 10 * time.Second}, Shadow: true},
	}
	tests := []struct {
		name          string
		policies      []Policy
		shadowHeaders bool
		requests      int // the last one is inspected
		status        int
		want          []want
	}{
		{
			name:     "one policy",
			policies: []Policy{{Name: "default", Limit: sluice.PerMinute(100)}},
			requests: 1,
			status:   200,
			// GCRA 100/min: after one request, 99 left and full again in 0.6s (t rounds up).
			want: []want{{name: "default", q: 100, w: 60, r: 99, t: 1}},
		},
		{
			name:          "several policies with partition keys and a shadow, ShadowHeaders",
			policies:      severalWithShadow,
			shadowHeaders: true,
			requests:      3,
			status:        200,
			want: []want{
				{name: "per-ip", q: 10, w: 1, r: 7, t: 1},
				// The fixed hour window started at 05:00 UTC; it ends 59.877s after start.
				{name: "per-key", q: 1000, w: 3600, r: 997, t: 60, pk: "api_key:" + hasher.Sum("k1")},
				// The shadow log is full after 2; the third request would be denied and
				// would pass in 10s, when the first admitted event ages out.
				{name: "shadow", q: 2, w: 10, r: 0, t: 10},
			},
		},
		{
			name:     "several policies with partition keys and a shadow, left out by default",
			policies: severalWithShadow,
			requests: 3,
			status:   200,
			want: []want{
				{name: "per-ip", q: 10, w: 1, r: 7, t: 1},
				{name: "per-key", q: 1000, w: 3600, r: 997, t: 60, pk: "api_key:" + hasher.Sum("k1")},
			},
		},
		{
			name: "denied: t capped at Retry-After",
			policies: []Policy{
				{Name: "tight", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: 5 * time.Second}},
				{Name: "daily", Limit: sluice.PerDay(100)},
			},
			requests: 2,
			status:   429,
			want: []want{
				{name: "tight", q: 1, w: 5, r: 0, t: 5},
				// Passed on its own and spent nothing (atomic): 99 left after the first
				// request, and its t (864s) is capped at Retry-After (5).
				{name: "daily", q: 100, w: 86400, r: 99, t: 5},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newStore(t)
			h := mustNew(t, Config{Limiter: store, Policies: tt.policies, LegacyHeaders: true, ShadowHeaders: tt.shadowHeaders}).Handler(okHandler)
			var w *httptest.ResponseRecorder
			for range tt.requests {
				w = do(h, "GET", "/", "198.51.100.1:1000", "X-API-Key", "k1")
			}
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			pol := parseList(t, w.Header(), "RateLimit-Policy")
			lim := parseList(t, w.Header(), "RateLimit")
			if len(pol) != len(tt.want) || len(lim) != len(tt.want) {
				t.Fatalf("%d policy items and %d limit items, want %d", len(pol), len(lim), len(tt.want))
			}
			for i, wa := range tt.want {
				p, l := pol[i], lim[i]
				if p.name != wa.name || l.name != wa.name {
					t.Errorf("item %d names %q/%q, want %q", i, p.name, l.name, wa.name)
				}
				if p.params["q"] != wa.q || p.params["w"] != wa.w {
					t.Errorf("%s: policy q=%v w=%v, want q=%d w=%d", wa.name, p.params["q"], p.params["w"], wa.q, wa.w)
				}
				if l.params["r"] != wa.r || l.params["t"] != wa.t {
					t.Errorf("%s: r=%v t=%v, want r=%d t=%d", wa.name, l.params["r"], l.params["t"], wa.r, wa.t)
				}
				for _, it := range []sfItem{p, l} {
					pk, has := it.params["pk"]
					switch {
					case wa.pk == "" && has:
						t.Errorf("%s: unexpected pk %v", wa.name, pk)
					case wa.pk != "":
						b, ok := pk.([]byte)
						if !ok || string(b) != wa.pk {
							t.Errorf("%s: pk %#v, want Byte Sequence %q", wa.name, pk, wa.pk)
						}
					}
				}
			}
			if tt.status == http.StatusTooManyRequests {
				ra := retryAfter(t, w)
				for _, l := range lim {
					if l.params["t"].(int64) > int64(ra/time.Second) {
						t.Errorf("%s: t=%v is later than Retry-After %v", l.name, l.params["t"], ra)
					}
				}
			}
		})
	}
}

func TestLegacyHeaders(t *testing.T) {
	store, _ := newStore(t)
	cfg := Config{Limiter: store, Policies: []Policy{
		{Name: "burst", Limit: sluice.PerSecond(5)},
		{Name: "hourly", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}},
	}}
	plain := mustNew(t, cfg).Handler(okHandler)
	cfg.LegacyHeaders = true
	legacy := mustNew(t, cfg).Handler(okHandler)

	w := do(plain, "GET", "/", "")
	if w.Header().Get("X-RateLimit-Limit") != "" {
		t.Error("legacy headers sent without LegacyHeaders")
	}
	// After the first request above: burst 4 left, hourly 2 left, so hourly is tighter.
	w = do(legacy, "GET", "/", "")
	for name, want := range map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60"} {
		if got := w.Header().Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	do(legacy, "GET", "/", "")
	w = do(legacy, "GET", "/", "")
	if w.Code != 429 {
		t.Fatalf("status %d, want 429", w.Code)
	}
	if got, want := w.Header().Get("X-RateLimit-Reset"), w.Header().Get("Retry-After"); got != want || got == "" {
		t.Errorf("denied: X-RateLimit-Reset %q, want Retry-After %q", got, want)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("denied: X-RateLimit-Remaining %q, want 0", got)
	}
}

// openLimiter answers as a failover decorator does when its store is down and the policy
// fails open.
type openLimiter struct{}

func (openLimiter) Decide(_ context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	for i, r := range reqs {
		ds[i] = sluice.Decision{Allowed: true, Limit: r.Limit, Path: sluice.PathOpen}
	}
	return sluice.Report{StoreCalled: true, Failure: sluice.ErrStoreUnavailable, Kind: store.KindRefused,
		Fallback: sluice.Failure{Mode: sluice.FailOpen}}, nil
}

func (openLimiter) Reserve(context.Context, string, sluice.Limit, int64) (sluice.Reservation, error) {
	return sluice.Reservation{}, sluice.ErrStoreUnavailable
}

func (openLimiter) Reset(context.Context, string, sluice.Limit) error { return nil }
func (openLimiter) Settle(context.Context, string, sluice.Limit, sluice.ReservationID, int64) (sluice.Decision, error) {
	return sluice.Decision{}, nil
}

func (openLimiter) Release(context.Context, string, sluice.Limit, sluice.LeaseID) (bool, error) {
	return false, nil
}

// TestHeadersFailOpen: a decision that failed open is named in RateLimit-Policy but left
// out of RateLimit and the legacy fields: its quota is unknown, and r=0 would tell
// clients to stop while every request is allowed.
func TestHeadersFailOpen(t *testing.T) {
	cfg := Config{Limiter: openLimiter{}, LegacyHeaders: true, Policies: []Policy{{Name: "burst", Limit: sluice.PerSecond(5)}}}
	w := do(mustNew(t, cfg).Handler(okHandler), "GET", "/", "")
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"burst";q=5;w=1` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	for _, name := range []string{"RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if got := w.Header().Get(name); got != "" {
			t.Errorf("%s = %q on a fail-open decision", name, got)
		}
	}
}
