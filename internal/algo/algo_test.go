package algo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
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
	for _, a := range store.Algorithms() {
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
	default: // Burst + ⌊(Period-1)·S/U⌋ in an open window of one Period
		return p.Burst + MulDiv(p.Period-1, p.S, p.U)
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
			// A client sending one unit at each instant k·Period/Rate after a window
			// boundary, rounded up to the limiter's µs resolution: exactly the limit, with
			// gaps of ⌊Period/Rate⌋ and ⌈Period/Rate⌉ when Rate does not divide Period.
			start := windowStart(epoch, p.Period) + p.Period
			for k := int64(0); k < 5000; k++ {
				now := start + MulDivCeil(k, p.Period, p.Rate)
				if r := m.decide(now, 1); !r.Allowed {
					t.Fatalf("request %d at %dµs, exactly at the limit, denied: %+v", k, now-start, r)
				}
			}
		})
	}
}

// TestBurstEveryPeriodNeverDenied: a client sending its whole Rate at the start of every
// Period is within the limit, and the bucket algorithms with Burst ≥ Rate (the default)
// admit all of it, in every Period, including when Rate does not divide Period (7 per
// second: each unit is 142857 1/7 µs, which rounding up to whole µs would overcharge by 6 µs
// a second, denying the seventh unit of every other second).
func TestBurstEveryPeriodNeverDenied(t *testing.T) {
	for _, l := range []sluice.Limit{
		{Rate: 7, Period: time.Second},
		{Rate: 3, Period: time.Second, Burst: 5},
		{Rate: 1000, Period: time.Hour},
		{Rate: 9973, Period: time.Hour}, // a prime rate: S = 9973
		{Rate: 10, Period: time.Second},
	} {
		for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingLog} {
			if a == sluice.SlidingLog && l.Rate > 1000 {
				continue // one timestamp per unit: the test would take minutes
			}
			l := l.With(a)
			t.Run(l.String(), func(t *testing.T) {
				m := newMachine(l)
				p := m.p
				start := windowStart(epoch, p.Period) + p.Period
				for k := int64(0); k < 50; k++ {
					now := start + k*p.Period
					if p.Rate > 1000 { // in one call
						if r := m.decide(now, p.Rate); !r.Allowed {
							t.Fatalf("period %d: the whole rate at once denied: %+v", k, r)
						}
						continue
					}
					for i := int64(0); i < p.Rate; i++ {
						if r := m.decide(now, 1); !r.Allowed {
							t.Fatalf("period %d: unit %d of %d denied: %+v", k, i, p.Rate, r)
						}
					}
				}
			})
		}
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

func TestParamsUnits(t *testing.T) {
	for _, c := range []struct {
		l    sluice.Limit
		s, u int64
	}{
		{sluice.PerSecond(10), 1, 100_000},
		{sluice.PerSecond(7), 7, 1_000_000},
		{sluice.Limit{Rate: 6, Period: time.Second, Burst: 4}, 3, 500_000},
		{sluice.PerHour(9973), 9973, 3_600_000_000},
		// Burst·Period/gcd above 2^50: whole µs, U = T = ⌈Period/Rate⌉.
		{sluice.Limit{Rate: 3, Period: 1 << 49 * time.Microsecond, Burst: 3}, 1, (1<<49 + 2) / 3},
		{sluice.Limit{Rate: 7, Period: time.Second, Burst: 2_000_000_000}, 1, 142_858},
	} {
		p := ParamsOf(c.l)
		if p.S != c.s || p.U != c.u {
			t.Errorf("%v: S, U = %d, %d, want %d, %d", c.l, p.S, p.U, c.s, c.u)
		}
	}
}

// TestFallbackSpacesUnitsByT: a limit that falls back to whole µs spaces units by
// T = ⌈Period/Rate⌉ exactly, never closer, in all three bucket algorithms alike.
func TestFallbackSpacesUnitsByT(t *testing.T) {
	base := sluice.Limit{Rate: 3, Period: 1 << 49 * time.Microsecond, Burst: 3}
	var ms []*machine
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		ms = append(ms, newMachine(base.With(a)))
	}
	p := ms[0].p
	if p.S != 1 || p.U != p.T {
		t.Fatalf("S, U = %d, %d; want the fallback 1, %d", p.S, p.U, p.T)
	}
	for _, m := range ms {
		now := epoch
		for i := 0; i < 3; i++ {
			if r := m.decide(now, 1); !r.Allowed {
				t.Fatalf("%v: burst unit %d denied", p.Algo, i)
			}
		}
		for i := 0; i < 5; i++ {
			r := m.decide(now, 1)
			if r.Allowed || r.RetryAfter != p.T {
				t.Fatalf("%v: after the burst %+v, want a denial until the next T", m.p.Algo, r)
			}
			now += r.RetryAfter
			if r := m.decide(now-1, 1); r.Allowed {
				t.Fatalf("%v: allowed 1µs before RetryAfter", m.p.Algo)
			}
			if r := m.decide(now, 1); !r.Allowed {
				t.Fatalf("%v: denied at RetryAfter", m.p.Algo)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	now := epoch
	for i := 0; i < 5000; i++ {
		now += rng.Int64N(2*p.T + 1)
		n := rng.Int64N(4)
		want := ms[0].decide(now, n)
		for _, m := range ms[1:] {
			if got := m.decide(now, n); got != want {
				t.Fatalf("step %d: %v gives %+v, gcra %+v", i, m.p.Algo, got, want)
			}
		}
	}
}

// TestGCRAStepIsGCRA: GCRAStep and GCRAAllowed split GCRA (S = 1) without changing it.
func TestGCRAStepIsGCRA(t *testing.T) {
	for _, l := range testLimits {
		p := ParamsOf(l.With(sluice.GCRA))
		if p.S != 1 {
			continue
		}
		rng := rand.New(rand.NewPCG(11, uint64(l.Rate)))
		s, now := State{}, epoch
		for i := 0; i < 20000; i++ {
			now += randomStep(rng, now, p) - rng.Int64N(p.T) // sometimes backwards
			n := 1 + rng.Int64N(p.MaxCost())
			want, wr := GCRA(s, now, p, n)
			next, ok := GCRAStep(s.A, now, &p, n)
			if ok != wr.Allowed || ok && (next != want.A || GCRAAllowed(next, now, &p) != wr) {
				t.Fatalf("%v step %d: GCRAStep %d %v, GCRAAllowed %+v; GCRA %+v %+v", l, i, next, ok, GCRAAllowed(next, now, &p), want, wr)
			}
			s = want
		}
	}
}

// TestGCRAFreshIsGCRA: GCRAFresh is GCRA on the zero State for every test limit with S = 1
// (GCRA's, TokenBucket's and LeakyBucket's Params), every cost up to past MaxCost, and
// times from the epoch to far after it.
func TestGCRAFreshIsGCRA(t *testing.T) {
	tested := 0
	for _, l := range testLimits {
		for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
			p := ParamsOf(l.With(a))
			if p.S != 1 {
				continue
			}
			tested++
			rng := rand.New(rand.NewPCG(17, uint64(l.Rate)))
			for i := 0; i < 20000; i++ {
				var now int64
				switch i % 4 {
				case 0:
					now = rng.Int64N(3) // at the epoch
				case 1:
					now = rng.Int64N(epoch)
				default:
					now = epoch + rng.Int64N(1<<52-epoch)
				}
				n := rng.Int64N(p.MaxCost() + 3)
				if i%5 == 0 {
					n = p.Burst + rng.Int64N(3) - 1
				}
				ws, wr := GCRA(State{}, now, p, n)
				gs, gr := GCRAFresh(now, &p, n)
				if gs != ws || gr != wr {
					t.Fatalf("%v (%v) at %d, n %d: GCRAFresh %+v %+v, GCRA %+v %+v", l, a, now, n, gs, gr, ws, wr)
				}
			}
		}
	}
	if tested == 0 {
		t.Fatal("no test limit has S = 1")
	}
}

// TestFillIsDecision: Fill writes over every field of a Decision already in use and leaves
// exactly what Decision returns, for a Result and an Outcome: stores fill their callers'
// Decisions in place, reused from call to call.
func TestFillIsDecision(t *testing.T) {
	used := sluice.Decision{Allowed: true, Limit: sluice.PerHour(9), Remaining: 9, ResetAfter: 9,
		RetryAfter: 9, Path: sluice.PathCache, Lease: 9, Reservation: 9, Window: 9}
	for _, l := range testLimits {
		for _, o := range []Outcome{
			{Result: Result{Allowed: true, Remaining: 3, ResetAfter: 1500}},
			{Result: Result{RetryAfter: 7, ResetAfter: 2}, Lease: 4, Window: 86_400_000_000},
			{},
		} {
			want := sluice.Decision{Allowed: o.Allowed, Limit: l, Remaining: o.Remaining,
				ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
				RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond}
			d := used
			o.Result.Fill(&d, &l)
			if d != want || o.Result.Decision(l) != want {
				t.Fatalf("%v: Result %+v filled %+v, Decision %+v, want %+v", l, o.Result, d, o.Result.Decision(l), want)
			}
			want.Lease, want.Window = sluice.LeaseID(o.Lease), time.Duration(o.Window)*time.Microsecond
			d = used
			o.Fill(&d, &l)
			if d != want || o.Decision(l) != want {
				t.Fatalf("%v: Outcome %+v filled %+v, Decision %+v, want %+v", l, o, d, o.Decision(l), want)
			}
		}
	}
}

// TestGCRAHolding: the state GCRAHolding makes holds the credit it was given: a look at
// the same instant reports ⌊credit/U⌋ units and a full bucket (credit/S) µs later, rounded
// up; a credit of the whole burst or more is the zero State.
func TestGCRAHolding(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 41))
	for i := 0; i < 2000; i++ {
		l := trioLimit(rng)
		p := ParamsOf(l)
		bt := p.Burst * p.U
		now := epoch + rng.Int64N(p.Period)
		for _, credit := range []int64{0, 1, p.U - 1, p.U, rng.Int64N(bt + 1), bt - 1, bt, bt + 1} {
			if credit < 0 {
				continue
			}
			s := GCRAHolding(now, credit, p)
			if credit >= bt {
				if s != (State{}) {
					t.Fatalf("%v: credit %d of %d: %+v, want the zero State", l, credit, bt, s)
				}
				continue
			}
			_, r := GCRA(s, now, p, 0)
			if rem, reset := credit/p.U, ceilDiv(bt-credit, p.S); r.Remaining != rem || r.ResetAfter != reset {
				t.Fatalf("%v: credit %d of %d: look %+v, want Remaining %d, ResetAfter %d", l, credit, bt, r, rem, reset)
			}
		}
	}
}
