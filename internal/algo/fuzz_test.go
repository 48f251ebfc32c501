package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// fuzzLimit builds a valid limit from fuzz input, or reports false. Periods up to 10 s
// and rates up to 1000 keep each run of operations short while covering every rounding
// regime (Rate dividing Period or not, bursts above and below Rate).
func fuzzLimit(alg uint8, rate, periodUS, burst int64) (sluice.Limit, bool) {
	algs := store.Algorithms()
	abs := func(v int64) int64 {
		if v < 0 {
			return -(v + 1)
		}
		return v
	}
	l := sluice.Limit{
		Algorithm: algs[int(alg)%len(algs)],
		Rate:      1 + abs(rate)%1000,
		Period:    time.Duration(1+abs(periodUS)%10_000_000) * time.Microsecond,
		Burst:     abs(burst) % 2000,
	}
	return l, l.Validate() == nil
}

// FuzzDecide runs a sequence of decisions, with clock steps forward and back, on one key
// of any of the six algorithms, and checks the contract of the package doc at every step:
// results are never negative and Remaining never exceeds MaxCost; a denial or a look (cost
// 0) spends nothing (later decisions are those of the state before it); a clock step back never grants what the latest time seen
// would deny; and, while time only moves forward, RetryAfter and Remaining are exact and no
// interval of one Period admits more than the algorithm's documented bound.
//
// Each operation is 3 bytes: the step's scale and direction, its size, and the cost.
func FuzzDecide(f *testing.F) {
	for a := range uint8(6) {
		f.Add(a, int64(10), int64(1_000_000), int64(0), []byte{1, 40, 1, 2, 1, 1, 0x81, 3, 1, 4, 1, 2, 3, 200, 1})
		f.Add(a, int64(3), int64(1_000_000), int64(5), []byte{0, 0, 5, 1, 1, 1, 0x84, 1, 1, 3, 9, 1, 4, 2, 3})
		f.Add(a, int64(7), int64(3000), int64(2), []byte{2, 255, 2, 0x82, 255, 1, 2, 1, 1, 5, 1, 0})
	}
	f.Fuzz(func(t *testing.T, alg uint8, rate, periodUS, burst int64, ops []byte) {
		l, ok := fuzzLimit(alg, rate, periodUS, burst)
		if !ok {
			return // outside the target's domain: nothing to check
		}
		m := newMachine(l)
		p := m.p
		now, latest := epoch, epoch
		monotone := true
		var admitted []event
		for i := 0; i+2 < len(ops) && i < 300; i += 3 {
			scales := []int64{1, max(p.T/4, 1), p.T, max(p.Period/4, 1), p.Period, windowStart(now, p.Period) + p.Period - now}
			step := int64(ops[i+1]) * scales[int(ops[i]&0x7f)%len(scales)]
			if ops[i]&0x80 != 0 {
				now -= min(step, 3*p.Period)
				monotone = false
			} else {
				now += step
			}
			now = max(now, 1)
			latest = max(latest, now)
			n := int64(ops[i+2]) % (p.MaxCost() + 1)

			before := m.clone()
			ref := m.clone().decide(latest, n)
			r := m.decide(now, n)
			checkResult(t, p, r)
			if r.Allowed && !ref.Allowed {
				t.Fatalf("op %d: allowed at %d, but denied at the later time %d already seen", i/3, now, latest)
			}
			if !r.Allowed || n == 0 {
				// Nothing was spent: the state may have moved to a new window, but decides
				// as before.
				for k := int64(0); k < 3; k++ {
					at := max(now, latest) + k*p.T/2
					if ra, rb := before.clone().decide(at, 1), m.clone().decide(at, 1); ra != rb {
						t.Fatalf("op %d: cost %d (allowed %v) changed the state: %+v then %+v", i/3, n, r.Allowed, ra, rb)
					}
				}
			}
			if !monotone {
				continue
			}
			if !r.Allowed {
				checkRetryAfter(t, before, now, n, r)
			}
			checkRemaining(t, m, now, r)
			if r.Allowed && n > 0 {
				admitted = append(admitted, event{now, n})
			}
		}
		if monotone && len(admitted) > 0 {
			if got, b := maxInWindow(admitted, p.Period), bound(p); got > b {
				t.Fatalf("admitted %d in one Period, bound %d", got, b)
			}
		}
	})
}

// FuzzRefund: a spend refunded after other decisions never leaves the key more permissive
// than had the spend never been made (refund.go's contract), for any algorithm, history
// and delay.
func FuzzRefund(f *testing.F) {
	for a := range uint8(6) {
		f.Add(a, int64(10), int64(1_000_000), int64(0), uint64(1), uint8(3), uint8(3))
		f.Add(a, int64(7), int64(100_000), int64(2), uint64(9), uint8(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, alg uint8, rate, periodUS, burst int64, seed uint64, elapsedT, between uint8) {
		l, ok := fuzzLimit(alg, rate, periodUS, burst)
		if !ok {
			return // outside the target's domain: nothing to check
		}
		p := ParamsOf(l)
		rng := rand.New(rand.NewPCG(seed, uint64(alg)))
		c, ok := newRefundCase(t, rng, l, int64(elapsedT%8)*p.T, int(between%6))
		if !ok {
			return // outside the target's domain: nothing to check
		}
		noMorePermissive(t, l.String(), c.real, c.ideal, probeTimes(c.t2, p))
	})
}
