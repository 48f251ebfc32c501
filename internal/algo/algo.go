// Package algo holds sluice's six rate-limiting algorithms as pure state machines:
//
//	decide(state, now, params, cost) -> (state', result)
//
// They are the specification every store runs: package memory calls them directly, and the
// Redis store runs Lua transcriptions of them (redisstore/lua, one file per function, each
// naming the function here that it mirrors). A differential test holds the two to identical
// results.
//
// Beside them: the Concurrency limit's leases (lease.go), the refunds of spends that must
// not stand (refund.go), and the settlement of estimated costs (settle.go), each mirrored
// in Lua and held to the Go by a differential test too.
//
// # Rules every function follows
//
//   - Time is integer microseconds since the Unix epoch, at least 1 (the stores count
//     earlier clocks as 1 µs, so that no written state is the zero State); durations are
//     integer microseconds.
//     No floating point. Every intermediate stays below 2^53 for limits that pass
//     sluice.Limit.Validate, so Lua's doubles compute the same values exactly.
//   - cost n > 0 spends n units if they fit, all or nothing; a denial spends nothing and
//     leaves the state unchanged. n == 0 only looks: the result says whether one unit would
//     be allowed now (Allowed, RetryAfter) and how many remain, and the state is unchanged.
//     Callers validate n ≤ Params.MaxCost beforehand (store.CheckRequest).
//   - Time going backwards (an NTP step, a failover to a host whose clock is behind) never
//     grants quota: a state that records a time later than now allows no more than it would
//     at that time. The bucket machine (GCRA) counts the refill or drain between now and
//     that time as not yet come; the window algorithms treat now as that time, so elapsed
//     time is never negative. Results are never negative.
//   - A fresh key is the zero State; the functions never need to tell "absent" from a
//     state they wrote, and the zero State is the same as an expired one.
//
// GCRA, TokenBucket and LeakyBucket are one limiter, so they are one function, GCRA, under
// three names (see GCRA for why the names remain): Decide, Reserve (ReserveGCRA), Refund,
// Charge and ExpiresAt run it for all three, and TestBucketTrio holds its observable
// results to testdata/buckets.golden.
//
// # Results
//
//   - Remaining: units that would be allowed right now after this call.
//   - ResetAfter: time until the state is equivalent to empty (full bucket, empty windows);
//     the same instant as State.ExpiresAt, used for Redis TTLs and the memory sweeper.
//   - RetryAfter: for a denial, the exact time until the same cost is allowed if nothing else
//     is spent: allowed at now+RetryAfter, denied at now+RetryAfter-1µs. 0 when allowed.
package algo

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Params is a validated sluice.Limit in integer microseconds.
//
// The bucket machine (GCRA, under all three bucket names) counts in units of 1/S µs, in
// which one unit of cost is exactly U: U/S = Period/Rate, the emission interval, as a
// fraction in lowest terms (S = Rate/g, U = Period/g, g = gcd(Period, Rate)). Their
// arithmetic is then exact whether or not Rate divides Period: a client sending Rate units
// in every Period, in a burst at its start or spread evenly, is never denied, and no
// interval admits more than the exact bound. When Burst·U would exceed 2^50 (store.MaxPeriod in
// µs, which keeps every intermediate exact in Lua's doubles) the limit falls back to whole
// microseconds, S = 1 and U = T = ⌈Period/Rate⌉: the realised rate is then Period/T ≤ Rate,
// each unit losing less than 1 µs. Only limits whose Rate does not divide Period and whose
// Burst·Period/g is that large fall back (sluice.Limit.Validate already bounds Burst·T).
type Params struct {
	Rate   int64 // events per Period
	Period int64 // µs, ≥ 1
	Burst  int64 // bucket depth for the bucket algorithms; Rate for the windows
	T      int64 // emission interval ⌈Period/Rate⌉ µs, rounded up
	S      int64 // bucket algorithms: their time unit is 1/S µs (1 when Rate divides Period)
	U      int64 // bucket algorithms: one unit of cost in units of 1/S µs (U/S = Period/Rate)
	Algo   sluice.Algorithm
	// Calendar is set for a calendar limit (Algo FixedWindow, Period 0), decided by
	// CalendarWindow, not FixedWindow.
	Calendar bool
}

// maxScaled bounds Burst·U, the largest quantity the bucket algorithms hold, so that every
// intermediate stays below 2^53.
const maxScaled = 1 << 50

// ParamsOf converts a limit that passed Validate. For Concurrency, Period is the lease in
// µs and Burst is Rate.
func ParamsOf(l sluice.Limit) Params {
	if l.Algorithm == sluice.Concurrency {
		us := l.Lease.Microseconds()
		return Params{Rate: l.Rate, Period: us, Burst: l.Rate, T: us, S: 1, U: us, Algo: l.Algorithm}
	}
	p := Params{
		Rate:   l.Rate,
		Period: l.Period.Microseconds(),
		Burst:  store.EffectiveBurst(l),
		Algo:   l.Algorithm,
	}
	if !l.Calendar.IsZero() {
		p.Calendar = true
		return p
	}
	p.T = (p.Period + p.Rate - 1) / p.Rate
	g := gcd(p.Period, p.Rate)
	p.S, p.U = p.Rate/g, p.Period/g
	if p.S > 1 && p.U > maxScaled/p.Burst {
		p.S, p.U = 1, p.T
	}
	return p
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// MaxCost is the largest cost the limit can ever allow.
func (p Params) MaxCost() int64 {
	if p.Algo == sluice.Concurrency {
		return 1
	}
	return p.Burst
}

// Result is the outcome of one decision, in microseconds; what only some limits'
// decisions carry is in Outcome.
type Result struct {
	Allowed    bool
	Remaining  int64
	ResetAfter int64
	RetryAfter int64
}

// Outcome is a Result with what a Decision carries beyond it, which the store knows
// around the machine rather than from it: the lease an allowed Concurrency decision of
// cost 1 took (the id given to Concurrency; 0 otherwise), and the length of a calendar
// limit's period holding the decision's instant (Bounds.Window; 0 otherwise).
type Outcome struct {
	Result
	Lease  uint64
	Window int64
}

// State is the per-key state of every algorithm except SlidingLog, which keeps a Log.
// Each algorithm uses the fields its doc comment names; the zero State is a fresh key.
type State struct {
	A, B, C int64
}

// Micros is t as the algorithms take time: microseconds since the Unix epoch, and at least
// 1, so that no state they write is the zero State (a fresh key). A store reading a
// caller's clock converts it with Micros.
func Micros(t time.Time) int64 { return max(t.UnixMicro(), 1) }

// Decide runs p.Algo on a fixed-size state. It must not be called for SlidingLog or a
// calendar limit (see CalendarWindow).
func Decide(s State, now int64, p Params, n int64) (State, Result) {
	switch p.Algo {
	case sluice.FixedWindow:
		return FixedWindow(s, now, p, n)
	case sluice.SlidingWindow:
		return SlidingWindow(s, now, p, n)
	default: // GCRA, TokenBucket, LeakyBucket
		return GCRA(s, now, p, n)
	}
}

// ExpiresAt is the instant (µs) from which s is equivalent to the zero State under p:
// deleting it then changes no future decision. A state that has never admitted anything
// expires at once (0).
func ExpiresAt(s State, p Params) int64 {
	switch p.Algo {
	case sluice.FixedWindow:
		if s.B == 0 {
			return 0
		}
		if p.Calendar {
			return s.C
		}
		return s.A + p.Period
	case sluice.SlidingWindow:
		return slidingFullAt(s, p.Period)
	default: // the bucket machine: its TAT, rounded up
		return s.A
	}
}

func nonNeg(a int64) int64 { return max(a, 0) }

// ceilDiv is ⌈a/b⌉ for b > 0 and any a. b is often S, and S is usually 1.
func ceilDiv(a, b int64) int64 {
	if b == 1 {
		return a
	}
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}

// floorDiv is ⌊a/b⌋ for b > 0 and any a (Go's / truncates toward zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// MulDiv returns ⌊a·b/c⌋ for a, b ≥ 0, c > 0 when the result fits in int64, without
// overflowing the product. The Lua scripts compute the same value by binary long division
// (see redisstore/lua), keeping every intermediate below 3·c < 2^53.
func MulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// MulDivCeil returns ⌈a·b/c⌉ under the same conditions as MulDiv.
func MulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// Decision converts r into the public Decision for limit l.
func (r Result) Decision(l sluice.Limit) sluice.Decision { return Outcome{Result: r}.Decision(l) }

// Fill makes *d the Decision r.Decision(*l) returns, in place, field by field: every field
// of *d is overwritten.
func (r Result) Fill(d *sluice.Decision, l *sluice.Limit) {
	d.Allowed = r.Allowed
	d.Limit = *l
	d.Remaining = r.Remaining
	d.ResetAfter = time.Duration(r.ResetAfter) * time.Microsecond
	d.RetryAfter = time.Duration(r.RetryAfter) * time.Microsecond
	d.Path, d.Lease, d.Reservation, d.Window = 0, 0, 0, 0
}

// Decision converts o into the public Decision for limit l.
func (o Outcome) Decision(l sluice.Limit) sluice.Decision {
	var d sluice.Decision
	o.Fill(&d, &l)
	return d
}

// Fill makes *d the Decision o.Decision(*l) returns, in place, as Result.Fill does.
func (o Outcome) Fill(d *sluice.Decision, l *sluice.Limit) {
	o.Result.Fill(d, l)
	d.Lease = sluice.LeaseID(o.Lease)
	d.Window = time.Duration(o.Window) * time.Microsecond
}
