package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/share"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
)

func TestScale(t *testing.T) {
	tests := []struct {
		in   sluice.Limit
		ppm  int64
		want sluice.Limit
	}{
		{sluice.PerSecond(100), 500_000, sluice.Limit{Rate: 50, Period: time.Second}},
		{sluice.PerSecond(100).WithBurst(30), 333_333, sluice.Limit{Rate: 33, Period: time.Second, Burst: 9}},
		{sluice.PerSecond(3), 100_000, sluice.Limit{Rate: 1, Period: time.Second}},
		{sluice.PerMinute(1000).With(sluice.FixedWindow), 250_000, sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 250, Period: time.Minute}},
		{sluice.PerSecond(100), 1_000_000, sluice.Limit{Rate: 100, Period: time.Second}},
	}
	for _, tt := range tests {
		s := &Share{ppm: tt.ppm}
		if got := s.Limit(tt.in); got != tt.want {
			t.Errorf("Limit(%v) at %d ppm = %v, want %v", tt.in, tt.ppm, got, tt.want)
		}
		if err := s.Limit(tt.in).Validate(); err != nil {
			t.Errorf("Limit(%v) at %d ppm is invalid: %v", tt.in, tt.ppm, err)
		}
	}
	for _, f := range []float64{0, -0.5, 1.01, 1e-9} {
		if _, err := NewShare(memory.New(), f); err == nil {
			t.Errorf("NewShare(%v) accepted", f)
		}
	}
}

// TestPerRegionShares: two regions, each deciding against its own redis-server with half
// of a 100/s burst-10 limit, both offered four times the limit for 3 seconds on a shared
// clock (the stores' WithClock, so the count is exact): each admits exactly its half, a
// burst of 5 then one unit every 20ms over the 2997.5ms spanned, 5 + 149 = 154, and together
// what one limiter would.
func TestPerRegionShares(t *testing.T) {
	t.Parallel()
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second, Burst: 10}
	ctx := context.Background()
	var us atomic.Int64
	us.Store(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	clock := func() time.Time { return time.UnixMicro(us.Load()) }
	var shares [2]*Share
	for i := range shares {
		srv := redistest.Start(t)
		store, err := redisstore.Open(srv.URL(), redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if shares[i], err = NewShare(store, 0.5); err != nil {
			t.Fatal(err)
		}
	}
	var counts [2]int
	for step := 0; step < 1200; step++ { // 400 requests per second per region
		for i, s := range shares {
			d, err := s.AllowN(ctx, "tenant", l, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Limit.Rate != 50 || d.Limit.Burst != 5 {
				t.Fatalf("decision reports %v, want the region's share", d.Limit)
			}
			if d.Allowed {
				counts[i]++
			}
		}
		us.Add(2500)
	}
	for i, n := range counts {
		if n != 5+149 {
			t.Errorf("region %d admitted %d in 3s, want 154", i, n)
		}
	}
	mem := memory.New()
	defer mem.Close()
	if res, err := (&Share{inner: mem, ppm: 500_000}).Reserve(ctx, "k", l, 1); err != nil || !res.OK || res.Limit != share.Limit(l, 500_000) {
		t.Errorf("Reserve through a share of the memory store: %+v, %v; want it made under the share %v", res, err, share.Limit(l, 500_000))
	}
	var plain sluice.Limiter = cannotReserve{mem}
	s, _ := NewShare(plain, 0.5)
	if _, err := s.Reserve(ctx, "k", l, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve through a limiter that cannot: %v", err)
	}
}

// cannotReserve is a Limiter whose Reserve always refuses.
type cannotReserve struct{ sluice.Limiter }

func (cannotReserve) Reserve(context.Context, string, sluice.Limit, int64) (sluice.Reservation, error) {
	return sluice.Reservation{}, fmt.Errorf("cannotReserve: %w", errors.ErrUnsupported)
}

// TestShareDecide: a request of several limits is decided by the inner limiter under each
// limit's share, all or nothing, and its decisions report the shares.
func TestShareDecide(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	s, err := NewShare(mem, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	small, big := sluice.PerHour(4), sluice.PerHour(20) // shares: 2 and 10 per hour
	reqs := []sluice.Request{{Key: "k", Limit: small, N: 2}, {Key: "k", Limit: big, N: 2}}
	ds := make([]sluice.Decision, 2)
	if _, err := s.Decide(ctx, reqs, ds); err != nil || !ds[0].Allowed || !ds[1].Allowed ||
		ds[0].Limit != s.Limit(small) || ds[1].Limit != s.Limit(big) || ds[0].Remaining != 0 || ds[1].Remaining != 8 {
		t.Fatalf("within both shares: %+v, %v", ds, err)
	}
	reqs[0].N, reqs[1].N = 1, 3
	if _, err := s.Decide(ctx, reqs, ds); err != nil || ds[0].Allowed || ds[0].RetryAfter <= 0 || ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 8 {
		t.Fatalf("over the small share: %+v, %v; want nothing spent", ds, err)
	}
	if d, err := sluice.AllowN(ctx, mem, "k", s.Limit(big), 0); err != nil || d.Remaining != 8 {
		t.Fatalf("the big share in the store after the denial: %+v, %v; want 8 left", d, err)
	}
	reqs[1].Limit = sluice.Limit{Rate: 0, Period: time.Second}
	if _, err := s.Decide(ctx, reqs, ds); !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), "request 1") {
		t.Errorf("an invalid limit: %v, want ErrInvalidLimit naming request 1", err)
	}
	if reqs[1].Limit.Rate != 0 || reqs[0].Limit != small {
		t.Errorf("Decide changed the caller's requests: %+v", reqs)
	}
}
