package algo

import "github.com/sluicehq/sluice"

// Settlement: reserve an estimated cost now, settle the actual cost later.
//
// A decision whose cost is an estimate spends the estimate, as any decision does, and the
// store records it (Reserved). When the actual cost is known, Settle gives the difference
// back (an over-estimate) or charges it (an under-estimate):
//
//   - A charge spends the excess at the settlement's instant as a decision would, except
//     that it is never denied: it stops where the state is empty (a bucket with no
//     credit, a window counting Rate), the documented bound of every state, so the next
//     requests are denied until the state recovers as it always does. An overrun is
//     therefore paid for, up to one whole Burst (bucket) or Rate (window).
//   - A refund gives the excess back by the rules of the refunds (refund.go): never more
//     permissive than if the estimate had been the actual cost all along. For the window
//     algorithms it is exact while the reservation's window still counts. For the bucket
//     algorithms the refund is of a spend whose bucket, had it cost the actual amount,
//     could be full again no sooner than FullAt less the excess's emission time: the
//     give-back is reduced only by the time after that instant (when the bucket may
//     really have been full, so that the time accrued nothing), not by all the time
//     since the reservation. A settlement while the key is under load (its bucket not
//     full) thus gives the whole excess back; one on an idle key has nothing to give.
//
// Which algorithms settle: GCRA, TokenBucket, LeakyBucket, FixedWindow and SlidingWindow,
// whose state is a few counts that a charge or a refund moves. SlidingLog cannot: its
// state is the admitted units themselves, at most Rate timestamps, and an overrun charged
// after the fact would be units stamped at an instant they were not admitted at, or no
// room to stamp them at all. Concurrency has no cost to settle (a lease is released).

// Reserved is what a store records of an allowed decision of estimated cost N: the
// decision's instant At and FullAt, the instant its state was equivalent to empty again
// after the spend (At + the Result's ResetAfter, less 1 µs when S > 1 so that a rounded
// up ResetAfter never makes it later than it was).
type Reserved struct {
	N, At, FullAt int64
}

// ReservedOf is the record of an allowed decision of estimated cost n at now, r its Result.
func ReservedOf(p Params, n, now int64, r Result) Reserved {
	full := now + r.ResetAfter
	if p.S > 1 && r.ResetAfter > 0 {
		full--
	}
	return Reserved{N: n, At: now, FullAt: full}
}

// Settle settles reservation r at actual cost c (c ≥ 0) on state s at now, under p: a
// refund of r.N - c (see the overview above) when c is smaller, a charge of c - r.N when it
// is larger, nothing when they are equal. It must not be called for SlidingLog or
// Concurrency.
func Settle(s State, now int64, p Params, r Reserved, c int64) State {
	switch {
	case c < r.N:
		return Refund(s, now, p, r.N-c, refundAt(p, r, r.N-c))
	case c > r.N:
		return Charge(s, now, p, c-r.N)
	}
	return s
}

// refundAt is the instant a settlement's refund of x units counts as spent at: for the
// bucket algorithms the later of At and FullAt less x's emission time (rounded down), for
// the windows At, whose window the units were counted in.
func refundAt(p Params, r Reserved, x int64) int64 {
	switch p.Algo {
	case sluice.FixedWindow, sluice.SlidingWindow:
		return r.At
	}
	return max(r.At, r.FullAt-ceilDiv(min(x, p.Burst)*p.U, p.S))
}

// Charge spends n units of p.Algo on s at now whatever the state allows, stopping where it
// is empty (see the overview above). It must not be called for SlidingLog or Concurrency.
func Charge(s State, now int64, p Params, n int64) State {
	if n <= 0 {
		return s
	}
	n = min(n, p.Burst) // no more than empties the state; keeps n·U below 2^50
	switch p.Algo {
	case sluice.FixedWindow:
		return ChargeFixedWindow(s, now, p, n)
	case sluice.SlidingWindow:
		return ChargeSlidingWindow(s, now, p, n)
	default: // GCRA, TokenBucket, LeakyBucket
		return ChargeGCRA(s, now, p, n)
	}
}

// ChargeGCRA moves the TAT on by n·U/S from max(TAT, now), as GCRA's spend does, but to no
// later than now + Burst·U/S (an empty bucket). A TAT already later than that (the clock
// stepped back) is left as it is. Rounding: none; the cap is exact in units of 1/S µs.
//
// The cap is where a decision at the settlement's own instant finds the bucket empty, a
// function of the TAT and now alone, so two states that decide alike are charged alike.
func ChargeGCRA(s State, now int64, p Params, n int64) State {
	bt := p.Burst * p.U
	ta, tb := tatFrom(s, now)
	// TAT·S = ta·S - tb; the cap is now·S + bt. The first test keeps (ta-now)·S small.
	if ta-now > ceilDiv(bt, p.S) || (ta-now)*p.S-tb >= bt {
		return s
	}
	na, nb := advance(ta, tb, n*p.U, p.S)
	if (na-now)*p.S-nb <= bt {
		return State{A: na, B: nb}
	}
	q := ceilDiv(bt, p.S)
	return State{A: now + q, B: q*p.S - bt}
}

// ChargeFixedWindow counts n more units in now's window (moving the state on to it, as
// FixedWindow does; a clock behind the state's window charges that window), not beyond
// Rate.
func ChargeFixedWindow(s State, now int64, p Params, n int64) State {
	if w := windowStart(now, p.Period); w > s.A {
		s = State{A: w}
	}
	s.B = max(s.B, min(s.B+n, p.Rate))
	return s
}

// ChargeSlidingWindow counts n more units in now's window (moving the state on to it, as
// SlidingWindow does), not beyond Rate in that window.
func ChargeSlidingWindow(s State, now int64, p Params, n int64) State {
	P := p.Period
	s = slide(s, now, P)
	s.C = max(s.C, min(s.C+n, p.Rate))
	return s
}
