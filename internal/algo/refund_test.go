package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func (m *machine) refund(now, n, at int64) {
	if m.p.Algo == sluice.SlidingLog {
		RefundSlidingLog(&m.log, now, m.p, n, at)
		return
	}
	m.s = Refund(m.s, now, m.p, n, at)
}

// probe is the Result of cost n at now on a copy of m: m is unchanged.
func (m *machine) probe(now, n int64) Result { return m.clone().decide(now, n) }

// probeTimes are instants around and after now at which two states are compared: the
// same instant, fractions of an emission interval, window boundaries and 1µs either side,
// and a few periods on.
func probeTimes(now int64, p Params) []int64 {
	next := windowStart(now, p.Period) + p.Period
	return []int64{now, now + 1, now + p.T/2, now + p.T, now + 2*p.T + 1, next - 1, next, next + 1,
		next + p.Period - 1, now + p.Period, now + 2*p.Period + p.T}
}

func probeCosts(p Params) []int64 {
	return []int64{0, 1, min(2, p.MaxCost()), max(p.MaxCost()/2, 1), p.MaxCost()}
}

// refundCase is one random scenario: a history on one key, our spend at t1, other
// decisions between t1 and the refund at t2 (each made on the real key and, if it was
// admitted there, on the ideal key, which never saw our spend), then the refund.
type refundCase struct {
	real, ideal *machine
	t1, t2      int64
	n           int64
	others      int // decisions admitted between the spend and the refund
}

// newRefundCase builds a scenario with monotone time. elapsed bounds t2 - t1 and between
// bounds the number of other decisions; ok is false when our spend was denied.
func newRefundCase(t *testing.T, rng *rand.Rand, l sluice.Limit, elapsed int64, between int) (refundCase, bool) {
	t.Helper()
	m := newMachine(l)
	p := m.p
	now := epoch + rng.Int64N(p.Period)
	for i := rng.IntN(12); i > 0; i-- {
		now += randomStep(rng, now, p)
		m.decide(now, 1+rng.Int64N(p.MaxCost()))
	}
	now += rng.Int64N(2 * p.T)
	c := refundCase{ideal: m.clone(), t1: now, n: 1 + rng.Int64N(p.MaxCost())}
	if !m.decide(now, c.n).Allowed {
		return c, false
	}
	c.ideal.decide(now, 0)
	c.real = m
	c.t2 = now + rng.Int64N(elapsed+1)
	for i := rng.IntN(between + 1); i > 0; i-- {
		at := c.t1 + rng.Int64N(c.t2-c.t1+1)
		if at < now {
			at = now
		}
		now = at
		k := 1 + rng.Int64N(p.MaxCost())
		if c.real.decide(now, k).Allowed {
			c.others++
			if !c.ideal.decide(now, k).Allowed {
				t.Fatalf("a decision admitted with our spend made was denied without it")
			}
		}
	}
	c.real.refund(c.t2, c.n, c.t1)
	return c, true
}

// noMorePermissive fails t when, at some probe, real admits what ideal denies or reports
// more remaining.
func noMorePermissive(t *testing.T, what string, real, ideal *machine, times []int64) {
	t.Helper()
	for _, at := range times {
		for _, n := range probeCosts(real.p) {
			r, i := real.probe(at, n), ideal.probe(at, n)
			if r.Allowed && !i.Allowed || unspent(r, n) > unspent(i, n) {
				t.Fatalf("%s: at %+d cost %d the refunded state allows more than without the spend: %+v vs %+v",
					what, at-epoch, n, r, i)
			}
		}
	}
}

// unspent is the Remaining r reports before its own spend.
func unspent(r Result, n int64) int64 {
	if r.Allowed {
		return r.Remaining + n
	}
	return r.Remaining
}

func sameResults(t *testing.T, what string, real, ideal *machine, times []int64) {
	t.Helper()
	for _, at := range times {
		for _, n := range probeCosts(real.p) {
			if r, i := real.probe(at, n), ideal.probe(at, n); r != i {
				t.Fatalf("%s: at %+d cost %d: refunded %+v, never spent %+v", what, at-epoch, n, r, i)
			}
		}
	}
}

func isBucket(a sluice.Algorithm) bool {
	return a == sluice.GCRA || a == sluice.TokenBucket || a == sluice.LeakyBucket
}

// TestRefundAtOnceRestores: a refund at the spend's own instant, with nothing spent in
// between, leaves a state that decides every later request exactly as if the spend had
// never been made, for every algorithm.
func TestRefundAtOnceRestores(t *testing.T) {
	for _, l := range allLimits() {
		rng := rand.New(rand.NewPCG(3, uint64(l.Rate)<<8|uint64(l.Algorithm)))
		for trial := 0; trial < 400; trial++ {
			c, ok := newRefundCase(t, rng, l, 0, 0)
			if !ok {
				continue
			}
			sameResults(t, l.String(), c.real, c.ideal, probeTimes(c.t2, c.real.p))
		}
	}
}

// TestRefundNeverOverAdmits: with time elapsed and other decisions admitted between the
// spend and the refund, the refunded state never allows more than the state without the
// spend, at any later instant; for the window algorithms and SlidingLog it decides
// exactly as that state, and for the bucket algorithms it is behind it by at most the
// elapsed time (whatever the state without the spend admits at t, the refunded state
// admits at t + (t2 - t1)).
func TestRefundNeverOverAdmits(t *testing.T) {
	for _, l := range allLimits() {
		rng := rand.New(rand.NewPCG(5, uint64(l.Rate)<<8|uint64(l.Algorithm)))
		p := ParamsOf(l)
		others := 0
		for trial := 0; trial < 600; trial++ {
			c, ok := newRefundCase(t, rng, l, 3*p.T, 3)
			if !ok {
				continue
			}
			others += c.others
			times := probeTimes(c.t2, p)
			noMorePermissive(t, l.String(), c.real, c.ideal, times)
			if !isBucket(l.Algorithm) {
				sameResults(t, l.String(), c.real, c.ideal, times)
				continue
			}
			e := c.t2 - c.t1
			for _, at := range times {
				for _, n := range probeCosts(p) {
					if i, r := c.ideal.probe(at, n), c.real.probe(at+e, n); i.Allowed && !r.Allowed {
						t.Fatalf("%v: allowed at %+d without the spend, denied %dµs later after the refund: %+v", l, at-epoch, e, r)
					}
				}
			}
		}
		if others == 0 {
			t.Fatalf("%v: no decision was admitted between a spend and its refund", l)
		}
	}
}

// TestRefundKeepsElapsedTime: a GCRA refund that gave back the whole spend would, after
// another spend in between, admit more than the limit: here a third unit within one
// emission interval of a burst of two.
func TestRefundKeepsElapsedTime(t *testing.T) {
	l := sluice.Limit{Rate: 1, Period: 10 * time.Microsecond, Burst: 2} // U = 10µs, two at once
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		m := newMachine(l.With(a))
		t0 := epoch
		m.decide(t0, 1)   // ours, to be refunded
		m.decide(t0+5, 1) // another client's
		m.refund(t0+6, 1, t0)
		admitted := 1 // t0+5
		for _, at := range []int64{t0 + 6, t0 + 10, t0 + 14} {
			if m.decide(at, 1).Allowed {
				admitted++
			}
		}
		// Without our spend: t0+5 and t0+6 pass (a burst of two), t0+10 and t0+14 wait
		// for t0+15.
		if admitted != 2 {
			t.Errorf("%v: %d admitted in [t0+5, t0+14], want 2", a, admitted)
		}
	}
}

// TestRefundStepBackNeverGrants: with the clock stepping back anywhere (in the history,
// between the spend and the refund, at the probes), a refund with nothing spent in between
// never leaves a state more permissive than the spend's decision would have left had it
// spent nothing.
func TestRefundStepBackNeverGrants(t *testing.T) {
	for _, l := range allLimits() {
		rng := rand.New(rand.NewPCG(9, uint64(l.Rate)<<8|uint64(l.Algorithm)))
		p := ParamsOf(l)
		for trial := 0; trial < 400; trial++ {
			m := newMachine(l)
			now := epoch + rng.Int64N(p.Period)
			for i := rng.IntN(12); i > 0; i-- {
				now += randomStep(rng, now, p) - rng.Int64N(p.Period+1) // often backwards
				m.decide(now, 1+rng.Int64N(p.MaxCost()))
			}
			t1 := now + rng.Int64N(4*p.Period) - 2*p.Period
			ideal := m.clone()
			n := 1 + rng.Int64N(p.MaxCost())
			if !m.decide(t1, n).Allowed {
				continue
			}
			ideal.decide(t1, 0) // the spend's decision, spending nothing: windows roll
			t2 := t1 + rng.Int64N(2*p.T+1) - rng.Int64N(2*p.Period+1)
			m.refund(t2, n, t1)
			times := append(probeTimes(t2, p), t2-p.T, t2-p.Period, t1, t1-1, t1-p.Period, t1-2*p.Period)
			noMorePermissive(t, l.String(), m, ideal, times)
		}
	}
}

// TestRefundUntouchedStates: a refund of a key that holds nothing (fresh, expired or reset)
// leaves it as it is, and n == 0 gives nothing back.
func TestRefundUntouchedStates(t *testing.T) {
	for _, l := range allLimits() {
		m := newMachine(l)
		m.refund(epoch, 1, epoch)
		if m.s != (State{}) || m.log.Len() != 0 {
			t.Errorf("%v: refund of a fresh key wrote %+v", l, m.s)
		}
		m.decide(epoch, 1)
		before := m.clone()
		m.refund(epoch, 0, epoch)
		sameResults(t, l.String()+" n=0", m, before, probeTimes(epoch, m.p))
	}
}

// TestRefundRolledWindowStepBack: a spend that moved a window algorithm's state to a new
// window leaves it there after its refund, as a look at the same instant would: a clock
// that then steps back into the old window sees the new window's count.
func TestRefundRolledWindowStepBack(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		l := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second}
		m := newMachine(l)
		t0 := windowStart(epoch, m.p.Period)
		m.decide(t0+10, 4)
		look := m.clone()
		t1 := t0 + 2*m.p.Period + 5 // two windows on: the old count is forgotten
		look.decide(t1, 0)
		m.decide(t1, 3)
		m.refund(t1, 3, t1)
		sameResults(t, a.String(), m, look, []int64{t0 + 20, t1, t1 + 1, t1 + m.p.Period})
	}
}
