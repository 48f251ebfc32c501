package region

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
)

func TestScale(t *testing.T) {
	tests := []struct {
		in   sluice.Limit
		ppm  int64
		want sluice.Limit
	}{
		{sluice.PerSecond(100), 500_000, sluice.Limit{Rate: 50, Period: time.Second, Burst: 50}},
		{sluice.PerSecond(100).WithBurst(30), 333_333, sluice.Limit{Rate: 33, Period: time.Second, Burst: 9}},
		{sluice.PerSecond(3), 100_000, sluice.Limit{Rate: 1, Period: time.Second, Burst: 1}},
		{sluice.PerMinute(1000).With(sluice.FixedWindow), 250_000, sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 250, Period: time.Minute}},
		{sluice.PerSecond(100), 1_000_000, sluice.Limit{Rate: 100, Period: time.Second, Burst: 100}},
	}
	for _, tt := range tests {
		if got := Scale(tt.in, tt.ppm); got != tt.want {
			t.Errorf("Scale(%v, %d) = %v, want %v", tt.in, tt.ppm, got, tt.want)
		}
		if err := Scale(tt.in, tt.ppm).Validate(); err != nil {
			t.Errorf("Scale(%v, %d) is invalid: %v", tt.in, tt.ppm, err)
		}
	}
	for _, f := range []float64{0, -0.5, 1.01, 1e-9} {
		if _, err := NewShare(memory.New(), f); err == nil {
			t.Errorf("NewShare(%v) accepted", f)
		}
	}
}

// TestPerRegionShares: two regions, each deciding against its own redis-server with half
// of a 100/s limit, both saturated for 1.5s: each admits its half, and together they stay
// within what one limiter would admit.
func TestPerRegionShares(t *testing.T) {
	t.Parallel()
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second, Burst: 10}
	ctx := context.Background()
	var counts [2]int
	var elapsed [2]time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	const runFor = 1500 * time.Millisecond
	for i := range counts {
		srv := redistest.Start(t)
		store, err := redisstore.Open(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		share, err := NewShare(store, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for w := 0; w < 4; w++ { // four workers per region, offering far more than 50/s
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < runFor {
					d, err := share.AllowN(ctx, "tenant", l, 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if d.Allowed {
						counts[i]++
						elapsed[i] = time.Since(start)
					}
					mu.Unlock()
					if d.Limit.Rate != 50 || d.Limit.Burst != 5 {
						t.Errorf("decision reports %v, want the region's share", d.Limit)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	for i, n := range counts {
		// At most half the burst plus half the rate over the time it ran; at least most
		// of it (the loop offers four times the share).
		most := 5 + 50*elapsed[i].Seconds()
		if float64(n) > most+1 || float64(n) < most*0.5 {
			t.Errorf("region %d admitted %d in %v, want about (at most) %.0f", i, n, elapsed[i], most)
		}
	}
	if _, err := (&Share{inner: memory.New(), ppm: 500_000}).Reserve(ctx, "k", l, 1); err != nil {
		t.Errorf("Reserve through a share of the memory store: %v", err)
	}
	var plain sluice.Limiter = onlyLimiter{memory.New()}
	s, _ := NewShare(plain, 0.5)
	if _, err := s.Reserve(ctx, "k", l, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve through a limiter that cannot: %v", err)
	}
}

// onlyLimiter hides every capability but sluice.Limiter.
type onlyLimiter struct{ sluice.Limiter }
