package httplimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/store"
)

func TestQuotaKeepsRemainingWithinQ(t *testing.T) {
	cases := []struct {
		l    sluice.Limit
		q, w int64
	}{
		{sluice.PerSecond(10), 10, 1},
		{sluice.PerSecond(10).WithBurst(20), 20, 2},   // the bucket: 20 per 2s
		{sluice.PerMinute(600).WithBurst(2), 600, 60}, // burst below rate: r ≤ 2 ≤ q
		{sluice.PerSecond(3).WithBurst(5), 5, 2},      // 5 per 1.66667s: floor(5·2/1.66667) per 2s
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Second, Burst: 99}, 10, 1},
	}
	for _, c := range cases {
		q, w := ratelimitheader.Quota(c.l)
		if q != c.q || w != c.w {
			t.Errorf("Quota(%v) = q=%d w=%d, want q=%d w=%d", c.l, q, w, c.q, c.w)
		}
		if store.EffectiveBurst(c.l) > c.l.Rate && q < store.EffectiveBurst(c.l) {
			t.Errorf("%v: q=%d below the burst a client can see as r", c.l, q)
		}
	}
	// As a client sees it, through the production stack: the first request's headers
	// advertise q and w, and r (the burst less the one spent) within q.
	for _, b := range backends(t) {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%v", b.name, c.l), func(t *testing.T) {
				lim, _ := b.new(t)
				w := do(mustNew(t, Config{Limiter: lim, Policies: []Policy{{Name: "p", Limit: c.l}}}).Handler(okHandler), "GET", "/", "")
				if w.Code != 200 {
					t.Fatalf("status %d", w.Code)
				}
				pol, rl := parseList(t, w.Header(), "RateLimit-Policy")[0], parseList(t, w.Header(), "RateLimit")[0]
				if pol.params["q"] != c.q || pol.params["w"] != c.w {
					t.Errorf("RateLimit-Policy q=%v w=%v, want q=%d w=%d", pol.params["q"], pol.params["w"], c.q, c.w)
				}
				r, _ := rl.params["r"].(int64)
				if r != c.l.MaxCost()-1 || r > c.q {
					t.Errorf("r=%v, want %d (the burst less 1), within q=%d", rl.params["r"], c.l.MaxCost()-1, c.q)
				}
			})
		}
	}
}
