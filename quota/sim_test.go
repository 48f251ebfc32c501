package quota

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
)

// simProxy is one proxy enforcing its assignment locally with a token bucket, as the
// rate_limit_quota filter does: a new assignment replaces the bucket and starts it full
// (the worst case for overshoot), no_assignment and expired_assignment are deny.
type simProxy struct {
	demand          int64 // offered requests per second
	acc             int64 // arrivals not yet whole, in thousandths
	nextReport      int64 // µs
	lastReport      int64
	alive           bool
	allowed, denied uint64 // since the last report
	has             bool
	expires         int64
	share, capTok   int64
	tokens          int64 // in millionths of a token (one period is 1e6 µs)
}

// TestSimulation: N proxies under skewed demand, one at 10× the others, then the skew
// moves to another proxy, then a proxy dies. Per second of virtual time the proxies
// together must admit at most R + (1 + ⌈P/I⌉)·(B + N) (derived in docs/envoy.md: the
// shares sum to at most R at every instant, each proxy's bucket holds at most its part of
// the burst plus one token, and it is refilled at most once per report, at most ⌈P/I⌉
// times in a second, plus what it held when the second began). Each proxy's share must be
// within R/10 + 2 of its demand's proportional part of R from 3 reporting intervals
// after a shift (Share's floors cost at most R/10), and a dead proxy's share must be
// reclaimed after its TTL.
func TestSimulation(t *testing.T) {
	const (
		R, B, N   = 1000, 100, 10
		P         = time.Second
		I         = time.Second
		TTL       = 3 * time.Second
		step      = time.Millisecond
		end       = 60 * time.Second
		hot, cold = 2000, 200 // offered per second: 10×
	)
	bound := int64(R + (1+int64((P+I-1)/I))*(B+N))
	start := time.Unix(1.7e9, 0)
	clock := clocktest.New(start)
	store := NewMemory(clock.Now)
	t0 := clock.Micros()
	px := make([]*simProxy, N)
	for i := range px {
		px[i] = &simProxy{alive: true, nextReport: t0 + int64(i)*int64(I/time.Microsecond)/N, lastReport: t0}
	}
	phase := func(at time.Duration) int { return int(at / (20 * time.Second)) }
	setDemand := func(p int) {
		for i, x := range px {
			x.demand = cold
			if i == p {
				x.demand = hot
			}
		}
		if p == 2 {
			px[1].demand = hot // phase 2: proxy 1 stays hot, proxy 2 dies
			px[2].alive, px[2].demand = false, 0
		}
	}
	setDemand(0)
	admitted := make([]int64, end/time.Second)
	out := make([]Assignment, 1)
	shifts := []time.Duration{0, 20 * time.Second, 40 * time.Second}
	var worst int64
	checked := 0
	for at := time.Duration(0); at < end; at += step {
		if at%(20*time.Second) == 0 {
			setDemand(phase(at))
		}
		now := clock.Micros()
		// Demand shares as they are now, for the check below.
		var total int64
		for _, x := range px {
			total += x.demand
		}
		for i, x := range px {
			if !x.alive {
				continue
			}
			if now >= x.nextReport {
				d := Demand(x.allowed, x.denied, time.Duration(now-x.lastReport)*time.Microsecond, P, DemandCap*R)
				rep := Report{Key: "b", Client: string(rune('a' + i)), Rate: R, Weight: Weight(d, R), TTL: TTL}
				if err := store.Rebalance(context.Background(), []Report{rep}, out); err != nil {
					t.Fatal(err)
				}
				a := out[0]
				if a.Assigned > R || a.Rate < 0 {
					t.Fatalf("%v: %+v", at, a)
				}
				x.has, x.expires, x.share = true, now+TTL.Microseconds(), a.Rate
				x.capTok = TokenBucket(a.Rate, R, B)
				x.tokens = x.capTok * 1e6
				x.allowed, x.denied, x.lastReport = 0, 0, now
				x.nextReport += I.Microseconds()
				// Shares follow demand 3 intervals after a shift (and after a TTL more
				// for a dead proxy's share to lapse).
				since := at - shifts[phase(at)]
				settle := 3 * I
				if phase(at) == 2 {
					settle += TTL
				}
				if since >= settle {
					want := R * x.demand / total
					if diff := a.Rate - want; diff > R/10+2 || diff < -(R/10+2) {
						t.Errorf("%v: proxy %d (demand %d of %d) has %d, want %d ± %d", at, i, x.demand, total, a.Rate, want, R/10+2)
					}
					if phase(at) == 2 && a.Clients != N-1 {
						t.Errorf("%v: %d clients, want the dead proxy gone", at, a.Clients)
					}
					checked++
				}
			}
			// Refill, then admit this millisecond's arrivals.
			if x.has && now < x.expires && x.share > 0 {
				x.tokens = min(x.capTok*1e6, x.tokens+x.share*step.Microseconds())
			}
			x.acc += x.demand
			for ; x.acc >= 1000; x.acc -= 1000 {
				if x.has && now < x.expires && x.share > 0 && x.tokens >= 1e6 {
					x.tokens -= 1e6
					x.allowed++
					admitted[at/time.Second]++
				} else {
					x.denied++
				}
			}
		}
		clock.Advance(step)
	}
	for sec, n := range admitted {
		worst = max(worst, n-R)
		if n > bound {
			t.Errorf("second %d: %d admitted, bound %d", sec, n, bound)
		}
		if sec%20 >= 5 && n < R*8/10 {
			t.Errorf("second %d: only %d admitted of %d", sec, n, R)
		}
	}
	if checked < 100 {
		t.Fatalf("only %d shares checked", checked)
	}
	t.Logf("global limit %d/s: worst second admitted %d over (bound %d over); per second: %v", R, worst, bound-R, admitted)
}
