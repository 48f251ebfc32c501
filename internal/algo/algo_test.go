package algo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// machine is one key's state under one algorithm, for driving tests uniformly.
type machine struct {
	p   Params
	s   State
	log Log
}

func newMachine(l sluice.Limit) *machine {
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return &machine{p: ParamsOf(l)}
}

func (m *machine) decide(now, n int64) Result {
	if m.p.Algo == sluice.SlidingLog {
		return SlidingLog(&m.log, now, m.p, n, true)
	}
	var r Result
	m.s, r = Decide(m.s, now, m.p, n)
	return r
}

func (m *machine) clone() *machine {
	c := *m
	c.log.ts = slices.Clone(m.log.ts)
	return &c
}

// epoch is a realistic start time: 2026-03-08 06:59:59.5 UTC, just before a US DST change.
var epoch = time.Date(2026, 3, 8, 6, 59, 59, 500_000_000, time.UTC).UnixMicro()

var testLimits = []sluice.Limit{
	{Rate: 10, Period: time.Second},
	{Rate: 3, Period: time.Second, Burst: 5},
	{Rate: 7, Period: 100 * time.Millisecond, Burst: 2},
	{Rate: 100, Period: time.Minute, Burst: 1},
	{Rate: 5, Period: 3 * time.Millisecond},
}

// allLimits returns every test limit under every algorithm.
func allLimits() []sluice.Limit {
	var out []sluice.Limit
	for _, a := range sluice.Algorithms() {
		for _, l := range testLimits {
			out = append(out, l.With(a))
		}
	}
	return out
}

type event struct{ t, n int64 }

// maxInWindow returns the largest total cost admitted in any interval (t-period, t].
func maxInWindow(ev []event, period int64) int64 {
	var best, sum int64
	j := 0
	for i := range ev {
		sum += ev[i].n
		for ev[j].t <= ev[i].t-period {
			sum -= ev[j].n
			j++
		}
		best = max(best, sum)
	}
	return best
}

// bound is the documented maximum admitted in any interval of length Period.
func bound(p Params) int64 {
	switch p.Algo {
	case sluice.SlidingLog:
		return p.Rate
	case sluice.FixedWindow, sluice.SlidingWindow:
		return 2 * p.Rate
	default: // Burst + ⌊(Period-1)/T⌋ in an open window of one Period
		return p.Burst + (p.Period-1)/p.T
	}
}

// randomStep returns a time step mixing tiny, period-scale, boundary-aligned and huge jumps.
func randomStep(rng *rand.Rand, now int64, p Params) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1: // to the next window boundary exactly, or just before it
		next := windowStart(now, p.Period) + p.Period
		return next - now - int64(rng.IntN(2))
	case 2:
		return p.Period * int64(1+rng.IntN(3))
	case 3:
		return rng.Int64N(p.Period*50 + 1)
	default:
		return rng.Int64N(2*p.Period/max(p.Rate, 1) + 2)
	}
}

func TestWindowBoundAndExactness(t *testing.T) {
	for _, l := range allLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(l.Rate)))
			m := newMachine(l)
			p := m.p
			now := epoch
			var admitted []event
			for i := 0; i < 20000; i++ {
				now += randomStep(rng, now, p)
				n := rng.Int64N(min(p.MaxCost(), 3) + 1)
				before := m.clone()
				r := m.decide(now, n)
				checkResult(t, p, r)
				if r.Allowed && n > 0 {
					admitted = append(admitted, event{now, n})
				}
				if !r.Allowed || n == 0 {
					// Nothing was spent: the next decisions match those from the old state.
					a, b := before.clone(), m.clone()
					for k := int64(0); k < 3; k++ {
						ra, rb := a.decide(now+k*p.T/2, 1), b.decide(now+k*p.T/2, 1)
						if ra != rb {
							t.Fatalf("step %d: cost %d (allowed=%v) changed the state: %+v vs %+v", i, n, r.Allowed, ra, rb)
						}
					}
				}
				if !r.Allowed {
					checkRetryAfter(t, before, now, n, r)
				}
				checkRemaining(t, m, now, r)
				checkReset(t, m, now, r)
			}
			if got, b := maxInWindow(admitted, p.Period), bound(p); got > b {
				t.Fatalf("admitted %d in one window, bound %d", got, b)
			}
			if len(admitted) == 0 {
				t.Fatal("nothing admitted")
			}
		})
	}
}

func checkResult(t *testing.T, p Params, r Result) {
	t.Helper()
	if r.Remaining < 0 || r.ResetAfter < 0 || r.RetryAfter < 0 {
		t.Fatalf("negative result %+v", r)
	}
	if r.Allowed && r.RetryAfter != 0 {
		t.Fatalf("allowed with RetryAfter %+v", r)
	}
	if !r.Allowed && r.RetryAfter == 0 {
		t.Fatalf("denied with RetryAfter 0 %+v", r)
	}
	if r.Remaining > p.MaxCost() {
		t.Fatalf("remaining %d above max %d", r.Remaining, p.MaxCost())
	}
}

// checkRetryAfter: the same cost is allowed at now+RetryAfter and denied 1µs earlier.
func checkRetryAfter(t *testing.T, before *machine, now, n int64, r Result) {
	t.Helper()
	if got := before.clone().decide(now+r.RetryAfter, n); !got.Allowed {
		t.Fatalf("denied at now+RetryAfter (%d µs) for cost %d: %+v", r.RetryAfter, n, got)
	}
	if got := before.clone().decide(now+r.RetryAfter-1, n); got.Allowed {
		t.Fatalf("allowed 1µs before RetryAfter (%d µs) for cost %d", r.RetryAfter, n)
	}
}

// checkRemaining: Remaining units fit now and Remaining+1 do not.
func checkRemaining(t *testing.T, m *machine, now int64, r Result) {
	t.Helper()
	if r.Remaining > 0 {
		if got := m.clone().decide(now, r.Remaining); !got.Allowed {
			t.Fatalf("Remaining %d does not fit: %+v", r.Remaining, got)
		}
	}
	if r.Remaining+1 <= m.p.MaxCost() {
		if got := m.clone().decide(now, r.Remaining+1); got.Allowed {
			t.Fatalf("Remaining+1 = %d fits", r.Remaining+1)
		}
	}
}

// checkReset: at now+ResetAfter the key is back to a full allowance, 1µs before it is not.
func checkReset(t *testing.T, m *machine, now int64, r Result) {
	t.Helper()
	full := m.p.MaxCost()
	if got := m.clone().decide(now+r.ResetAfter, 0); got.Remaining != full {
		t.Fatalf("at now+ResetAfter (%d) remaining %d, want %d", r.ResetAfter, got.Remaining, full)
	}
	if r.ResetAfter > 0 {
		if got := m.clone().decide(now+r.ResetAfter-1, 0); got.Remaining == full {
			t.Fatalf("full already 1µs before ResetAfter (%d)", r.ResetAfter)
		}
	}
	if m.p.Algo != sluice.SlidingLog {
		if exp := ExpiresAt(m.s, m.p); max(exp-now, 0) != r.ResetAfter && !(exp <= now && r.ResetAfter == 0) {
			t.Fatalf("ExpiresAt %d - now = %d, ResetAfter %d", exp, exp-now, r.ResetAfter)
		}
	}
}

func TestSteadyClientAtLimitNeverDenied(t *testing.T) {
	for _, l := range allLimits() {
		t.Run(l.String(), func(t *testing.T) {
			m := newMachine(l)
			p := m.p
			// A client sending one unit every Period/Rate (rounded up to the limiter's µs
			// resolution), starting on a window boundary.
			gap := (p.Period + p.Rate - 1) / p.Rate
			now := windowStart(epoch, p.Period) + p.Period
			for i := 0; i < 5000; i++ {
				if r := m.decide(now, 1); !r.Allowed {
					t.Fatalf("request %d at the limit denied: %+v", i, r)
				}
				now += gap
			}
		})
	}
}

func TestFixedWindowBoundaryBurstReachesTwiceRate(t *testing.T) {
	m := newMachine(sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Minute})
	boundary := windowStart(epoch, m.p.Period) + m.p.Period
	var ev []event
	for _, at := range []int64{boundary - 1, boundary} {
		for i := 0; i < 150; i++ {
			if m.decide(at, 1).Allowed {
				ev = append(ev, event{at, 1})
			}
		}
	}
	if got := maxInWindow(ev, m.p.Period); got != 200 {
		t.Fatalf("boundary burst admitted %d within 1µs, want exactly 2×100", got)
	}
}

func TestGCRAAndTokenBucketAndLeakyBucketAgree(t *testing.T) {
	for _, l := range testLimits {
		rng := rand.New(rand.NewPCG(7, uint64(l.Rate)))
		ms := []*machine{newMachine(l.With(sluice.GCRA)), newMachine(l.With(sluice.TokenBucket)), newMachine(l.With(sluice.LeakyBucket))}
		now := epoch
		for i := 0; i < 50000; i++ {
			now += randomStep(rng, now, ms[0].p)
			n := rng.Int64N(min(ms[0].p.MaxCost(), 3) + 1)
			want := ms[0].decide(now, n)
			for _, m := range ms[1:] {
				if got := m.decide(now, n); got != want {
					t.Fatalf("%v step %d: %v gives %+v, gcra %+v", l, i, m.p.Algo, got, want)
				}
			}
		}
	}
}

func TestTimeGoingBackwardsGrantsNothing(t *testing.T) {
	for _, l := range allLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(l.Rate)))
			m := newMachine(l)
			p := m.p
			now, latest := epoch, epoch
			for i := 0; i < 20000; i++ {
				if rng.IntN(5) == 0 {
					now -= rng.Int64N(3 * p.Period) // a step back, up to three periods
				} else {
					now += randomStep(rng, now, p)
				}
				latest = max(latest, now)
				n := rng.Int64N(min(p.MaxCost(), 3) + 1)
				// What the same state would decide at the latest time seen: a clock that went
				// back must never be more generous than that.
				ref := m.clone().decide(latest, n)
				r := m.decide(now, n)
				checkResult(t, p, r)
				if r.Allowed && !ref.Allowed {
					t.Fatalf("step %d: allowed at %d but denied at the later %d", i, now, latest)
				}
				if early, late := m.clone().decide(now, 0).Remaining, m.clone().decide(latest, 0).Remaining; early > late {
					t.Fatalf("step %d: remaining %d at an earlier time exceeds %d", i, early, late)
				}
			}
		})
	}
}

func TestSlidingLogKeepsAtMostRate(t *testing.T) {
	m := newMachine(sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 50, Period: time.Second})
	rng := rand.New(rand.NewPCG(9, 9))
	now := epoch
	for i := 0; i < 100000; i++ {
		now += rng.Int64N(40_000)
		m.decide(now, rng.Int64N(4))
		if m.log.Len() > 50 || len(m.log.ts) > 50 {
			t.Fatalf("log holds %d (capacity %d), rate 50", m.log.Len(), len(m.log.ts))
		}
	}
}

func TestMulDiv(t *testing.T) {
	cases := []struct{ a, b, c, floor, ceil int64 }{
		{0, 5, 3, 0, 0},
		{7, 3, 2, 10, 11},
		{1 << 40, 1 << 50, 1 << 50, 1 << 40, 1 << 40},
		{(1 << 40) - 1, (1 << 50) - 3, 1 << 50, 1099511627774, 1099511627775},
	}
	for _, c := range cases {
		if got := MulDiv(c.a, c.b, c.c); got != c.floor {
			t.Errorf("MulDiv(%d,%d,%d)=%d want %d", c.a, c.b, c.c, got, c.floor)
		}
		if got := MulDivCeil(c.a, c.b, c.c); got != c.ceil {
			t.Errorf("MulDivCeil(%d,%d,%d)=%d want %d", c.a, c.b, c.c, got, c.ceil)
		}
	}
}

func Example() {
	p := ParamsOf(sluice.PerSecond(2))
	var s State
	now := epoch
	for i := 0; i < 3; i++ {
		var r Result
		s, r = GCRA(s, now, p, 1)
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// true 1 0
	// true 0 0
	// false 0 500000
}
