package overload

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestGradientUpdate checks each line of the update in the package doc on one window.
func TestGradientUpdate(t *testing.T) {
	s, err := Config{MinLimit: 4, MaxLimit: 100, LongWindow: 100}.settings()
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		name        string
		g           gradient
		short, peak int64
		limit, long int64
	}{
		// grad = 1000; next = 20000 + ⌊√20 000 000⌋ = 24472; smoothed 20000 + 4472/5.
		{"latency as usual", gradient{limit: 20000, long: 100 * ms, n: 11}, 100 * ms, 20, 20894, 100 * ms},
		// long: 100 + (120 − 100)/100 = 100.2 ms; grad = 1500·100.2/120 → 1000 (clamped).
		{"within tolerance", gradient{limit: 20000, long: 100 * ms, n: 11}, 120 * ms, 20, 20894, 100*ms + 200_000},
		// long 101 ms; grad = 1500·101/200 = 757; next = 15140 + 4472; smoothed 20000 − 388/5.
		{"latency doubled", gradient{limit: 20000, long: 100 * ms, n: 11}, 200 * ms, 20, 19923, 101 * ms},
		// grad clamped at 500: next = 10000 + 4472; smoothed 20000 − 5528/5.
		{"latency ×5", gradient{limit: 20000, long: 100 * ms, n: 11}, 500 * ms, 20, 18895, 104 * ms},
		// application-limited: 2·9 < 20, so no growth.
		{"app-limited", gradient{limit: 20000, long: 100 * ms, n: 11}, 100 * ms, 9, 20000, 100 * ms},
		// app-limited does not stop a fall.
		{"app-limited, latency ×5", gradient{limit: 20000, long: 100 * ms, n: 11}, 500 * ms, 0, 18895, 104 * ms},
		// warm-up: the third window's mean of 90, 90 and 120.
		{"warm-up", gradient{limit: 20000, long: 90 * ms, n: 2}, 120 * ms, 20, 20894, 100 * ms},
		// long > 2·short: EWMA 300 − 250/100 = 297.5 ms, then − 1/20 = 282.625 ms.
		{"decay", gradient{limit: 20000, long: 300 * ms, n: 11}, 50 * ms, 20, 20894, 282_625_000},
		// clamped to MaxLimit.
		{"at the top", gradient{limit: 100000, long: 100 * ms, n: 11}, 100 * ms, 100, 100000, 100 * ms},
		// clamped to MinLimit: 4000·0.5 + ⌊√4 000 000⌋ = 4000; smoothed: 4000.
		{"at the bottom", gradient{limit: 4000, long: 100 * ms, n: 11}, 900 * ms, 4, 4000, 108 * ms},
		// a zero latency counts as 1 ns: long 100 ms − (100 ms − 1)/100, then less a twentieth.
		{"zero latency", gradient{limit: 20000, long: 100 * ms, n: 11}, 0, 20, 20894, 94_050_001},
	} {
		g := c.g
		g.update(&s, 0, c.short, c.peak)
		if g.limit != c.limit || g.long != c.long {
			t.Errorf("%s: limit %d long %d, want %d %d", c.name, g.limit, g.long, c.limit, c.long)
		}
	}
}

func TestIsqrt(t *testing.T) {
	for x := int64(0); x < 100_000; x++ {
		r := isqrt(x)
		if r*r > x || (r+1)*(r+1) <= x {
			t.Fatalf("isqrt(%d) = %d", x, r)
		}
	}
	for _, x := range []int64{maxLimit * 1000 * 1000, 1<<62 - 1} {
		if r := isqrt(x); r*r > x || (r+1)*(r+1) <= x {
			t.Fatalf("isqrt(%d) = %d", x, r)
		}
	}
}

// service is a closed-loop model of a service of `workers` workers: in each round the
// load takes every Critical permit the limiter gives, the whole batch is served together
// in base·max(1, n/workers) (queueing beyond the workers), and every permit is released.
type service struct {
	l       *Limiter
	clk     *fakeClock
	workers int
	settled bool // leave out the rounds that end while the limit is held to re-measure
}

// run plays rounds at the given base latency and returns the limit after each.
func (s service) run(rounds int, base time.Duration) []int {
	limits := make([]int, 0, rounds)
	for range rounds {
		var held []*Permit
		for {
			p, err := s.l.Acquire(context.Background(), Critical)
			if err != nil {
				break
			}
			held = append(held, p)
		}
		s.clk.advance(base * time.Duration(max(len(held), s.workers)) / time.Duration(s.workers))
		for _, p := range held {
			p.Release()
		}
		if !s.settled || !s.l.g.pinned {
			limits = append(limits, s.l.Stats().Limit)
		}
	}
	return limits
}

func spread(v []int) (lo, hi int) {
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// TestLatencyStep: the limit settles; when the service's latency doubles it falls, then,
// re-measuring, finds that the service takes as many requests at once as before and
// returns; when the latency recovers it settles where it was. The windows that re-measure
// are left out.
func TestLatencyStep(t *testing.T) {
	cfg := Config{MinLimit: 4, MaxLimit: 200, Window: 250 * time.Millisecond, MaxWait: -1}
	l, clk := newLimiter(t, cfg)
	svc := service{l, clk, 32, true}
	phase := func(name string, base time.Duration) []int {
		limits := svc.run(4000, base)
		for i, x := range limits {
			if x < cfg.MinLimit || x > cfg.MaxLimit {
				t.Fatalf("%s: round %d: limit %d outside [%d, %d]", name, i, x, cfg.MinLimit, cfg.MaxLimit)
			}
		}
		lo, hi := spread(limits[len(limits)/2:])
		t.Logf("%s: limit %d–%d over the second half", name, lo, hi)
		if 10*(hi-lo) > 4*(hi+lo)/2 { // ±20% of the midpoint
			t.Errorf("%s: the limit swings %d–%d once settled, more than ±20%%", name, lo, hi)
		}
		return limits
	}
	usual := phase("usual latency", 20*time.Millisecond)
	lo1, hi1 := spread(usual[len(usual)/2:])
	if lo1 <= svc.workers || hi1 > 3*svc.workers {
		t.Errorf("usual latency: the limit settled at %d–%d, want a queue beyond %d workers of at most twice as many", lo1, hi1, svc.workers)
	}
	doubled := phase("latency doubled", 40*time.Millisecond)
	if fell, _ := spread(doubled[:400]); 10*fell > 8*lo1 {
		t.Errorf("latency doubled: the limit fell to %d, not below 80%% of %d", fell, lo1)
	}
	recovered := phase("latency recovered", 20*time.Millisecond)
	for name, limits := range map[string][]int{"latency doubled": doubled, "latency recovered": recovered} {
		if lo, hi := spread(limits[len(limits)/2:]); 10*lo < 8*lo1 || 10*hi > 12*hi1 {
			t.Errorf("%s: the limit settled at %d–%d, not within 20%% of %d–%d", name, lo, hi, lo1, hi1)
		}
	}
}

// TestRemeasure: at the window's close Remeasure after the first, the limit is held at
// MinLimit for a window, whose latency becomes the long-term latency; then it returns.
func TestRemeasure(t *testing.T) {
	cfg := Config{MinLimit: 4, MaxLimit: 200, InitialLimit: 40, Window: time.Second, Remeasure: 10 * time.Second, MaxWait: -1}
	l, clk := newLimiter(t, cfg)
	svc := service{l, clk, 16, false} // 40 in flight take 250 ms, 16 or fewer 100 ms
	var limits []int
	var at []time.Duration // the clock after each round, since the start
	t0 := clk.now()
	for range 200 {
		limits = append(limits, svc.run(1, 100*time.Millisecond)...)
		at = append(at, clk.now().Sub(t0))
	}
	firstClose := at[slices.IndexFunc(limits, func(x int) bool { return x != 40 })-1]
	pinned := slices.Index(limits, cfg.MinLimit)
	if pinned < 0 {
		t.Fatalf("never re-measured: %v", limits)
	}
	back := pinned + slices.IndexFunc(limits[pinned:], func(x int) bool { return x != cfg.MinLimit })
	if back < pinned || 10*limits[back] < 9*limits[pinned-1] || 10*limits[back] > 11*limits[pinned-1] {
		t.Fatalf("the limit %d before re-measuring, %v from then on", limits[pinned-1], limits[pinned:])
	}
	// Pinned at the close of the first window 10 s after the first window's close, for
	// one window: 1 s of 100 ms rounds.
	if began := at[pinned-1] - firstClose; began < 10*time.Second || began > 11*time.Second || back-pinned != 10 {
		t.Errorf("held at MinLimit %v after the first window closed, for %d rounds; want 10 s, 10 rounds", began, back-pinned)
	}
	if l.g.long > int64(110*time.Millisecond) {
		t.Errorf("long-term latency %v after re-measuring 100 ms", time.Duration(l.g.long))
	}
}

// TestRemeasureBoundsCreep: under saturation that goes on, the limit creeps upward when
// it never re-measures, and stays near where it settled when it does.
func TestRemeasureBoundsCreep(t *testing.T) {
	run := func(remeasure time.Duration) (lo, hi int) {
		l, clk := newLimiter(t, Config{MaxLimit: 300, Window: 250 * time.Millisecond, Remeasure: remeasure, MaxWait: -1})
		limits := service{l, clk, 32, true}.run(6000, 20*time.Millisecond)
		return spread(limits[len(limits)/2:])
	}
	lo, hi := run(0)
	_, creep := run(-1)
	t.Logf("the limit over the second half: %d–%d re-measuring, up to %d never", lo, hi, creep)
	if hi > 3*32 || creep < 2*hi {
		t.Errorf("the limit over the second half: %d–%d re-measuring, up to %d never", lo, hi, creep)
	}
}

// TestClockStepsBack: a permit released at an earlier clock reading than it was acquired
// at gives no sample, and the window reopens at the earlier reading.
func TestClockStepsBack(t *testing.T) {
	l, clk := newLimiter(t, Config{Window: time.Second, MinSamples: 1})
	clk.advance(5 * time.Second)
	p, _ := l.Acquire(context.Background(), Critical)
	clk.advance(-2 * time.Second)
	p.Release()
	if l.winCount != 0 || l.g.n != 0 || l.winStart != 0 {
		t.Fatalf("window after a negative sample: %d samples, %d windows closed, opened at %v", l.winCount, l.g.n, time.Duration(l.winStart))
	}
	clk.advance(-time.Hour)
	for range 2 { // the first reopens the window at its release, the second closes it
		p, _ = l.Acquire(context.Background(), Critical)
		clk.advance(time.Second)
		p.Release()
	}
	if l.g.n != 1 || l.g.long != int64(time.Second) {
		t.Fatalf("after the clock stepped back an hour: %d windows closed, long-term latency %v", l.g.n, time.Duration(l.g.long))
	}
}
