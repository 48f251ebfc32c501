package algo

import "github.com/sluicehq/sluice"

// Refunds: giving back a spend that must not stand.
//
// A refund undoes a spend of n units made at the instant at (on the clock that decided it)
// when the request it belonged to was denied elsewhere: the Redis store decides a request
// whose limits live in several cluster slots one slot at a time, and gives back what the
// slots that spent took when another slot denied (redisstore, "Decisions across cluster
// slots"). Other decisions may have been made on the key between the spend and the
// refund. Every refund obeys one rule, which the tests check:
//
//   - the state after it is never more permissive, at any instant, than the state the
//     key would have had if the spend's decision had spent nothing and every other
//     decision had been made as it was: never over-admission. (A decision that spends
//     nothing still moves a window algorithm's state to its instant's window, as a look
//     does; that matters only to a clock that later steps back before that window.)
//   - It is exactly that state, in the Results of every later decision, when the refund
//     runs at the spend's own instant (now == at), and for the window algorithms and
//     SlidingLog whenever the clock did not step back before the spend.
//
// A refund of a key whose spend has already expired or been reset changes nothing that
// matters, and one of a key that other decisions have spent on since gives back no more
// than the first rule allows (reservations aside: see RefundGCRA). Refunds spend nothing
// and never deny, and they do not create keys (the zero State stays the zero State). n is
// the refunded spend's cost; n == 0 gives nothing back.

// Refund runs the refund of p.Algo on a fixed-size state. It must not be called for
// SlidingLog (see RefundSlidingLog).
func Refund(s State, now int64, p Params, n, at int64) State {
	switch p.Algo {
	case sluice.FixedWindow:
		if p.Calendar {
			return RefundCalendarWindow(s, p, n, at)
		}
		return RefundFixedWindow(s, now, p, n, at)
	case sluice.SlidingWindow:
		return RefundSlidingWindow(s, now, p, n, at)
	default: // GCRA, TokenBucket, LeakyBucket
		return RefundGCRA(s, now, p, n, at)
	}
}

// RefundGCRA gives back a spend of n units made at at by the bucket machine (GCRA, under
// any of its three names).
//
// The spend moved the TAT forward by n·U/S. The refund moves it back by that much less
// the time elapsed since the spend, g = n·U - max(0, now-at)·S (in units of 1/S µs; none
// when that is not positive), and not below now: TAT' = max(TAT - g/S, now). A TAT at or
// before now (a full allowance) is left as it is.
//
// Why the elapsed time is kept: between the spend and the refund another decision may
// have spent on the key. Had the refunded spend not been made, that decision might have
// found the bucket full, and the time during which it was full does not accumulate
// allowance; with the spend made, the TAT ran ahead through that time instead. Giving
// back all of n·U/S would hand that time out a second time. The time the bucket can have
// been full is at most now - at, so TAT - n·U/S + (now - at) is never below the TAT
// without the spend. When nothing else was spent in between, the refund is exact if the
// TAT before the spend was not ahead of at (the bucket had no backlog), and otherwise
// keeps now - at of emission time too many: it under-admits by at most
// (now-at)·Rate/Period units, once.
//
// Reservations (ReserveGCRA) between the spend and the refund are the exception: they
// take slots at a reserved instant that may be after now, and the refund leaves a hole
// before those slots that a single TAT cannot hold (as CancelReservation explains), into
// which up to n units may then be admitted beside the reserved ones. A limit that is
// paced with reservations should not also be refunded.
//
// Rounding: none. TAT' = A' - B'/S with B' ∈ [0, S), as GCRA keeps it.
//
// Time going backwards: a refund whose clock reads before at counts no time as elapsed
// and gives back n·U/S, which the TAT the spend left always covers (TAT - n·U/S ≥ at).
// The bound above assumes that the decisions between the spend and the refund were made
// at instants no later than the refund's now (a clock that does not step back within
// that round trip); a step back of d between them can leave up to d of emission time
// (d·Rate/Period units) too little in the TAT.
func RefundGCRA(s State, now int64, p Params, n, at int64) State {
	g := refundable(n, now, at, p)
	if g <= 0 || s.A <= now {
		return s
	}
	k := s.B + g
	q := k / p.S
	a, b := s.A-q, k-q*p.S
	if a <= now { // TAT' = a - b/S ≤ now: a full allowance
		return State{A: now}
	}
	return State{A: a, B: b}
}

// refundable is what RefundGCRA gives back, in units of 1/S µs: n·U less the time elapsed
// since at, max(0, now-at)·S, or 0 when that is not positive.
func refundable(n, now, at int64, p Params) int64 {
	g := n * p.U
	e := now - at
	if e <= 0 {
		return g
	}
	if e >= ceilDiv(g, p.S) {
		return 0
	}
	return g - e*p.S
}

// RefundFixedWindow gives back a FixedWindow spend of n units made at at: if the state
// still counts at's window, its count falls by n (not below 0). If the window has moved
// on, the spend no longer counts and nothing is given back. The refund is exact, and
// needs no rounding.
//
// Time going backwards: a spend made while the state counted a later window than at's
// was counted there; its refund finds another window than at's and gives nothing back.
func RefundFixedWindow(s State, now int64, p Params, n, at int64) State {
	if s.A != windowStart(at, p.Period) {
		return s
	}
	s.B -= min(n, s.B)
	return s
}

// RefundSlidingWindow gives back a SlidingWindow spend of n units made at at. The spend was
// counted in at's window: while that is the state's current window, its count (C) falls
// by n; once the state has moved one window on, at's window is the previous one and its
// count (B) falls by n; neither below 0. Later, the spend no longer counts and nothing is
// given back. The refund is exact, and needs no rounding.
//
// Time going backwards: a spend made while the state's current window was later than at's
// was counted in that window's C. If that window is at's next, the refund takes the units
// from B instead, which the estimate weighs no more than C (and which leaves the window
// one Period sooner): the estimate is never lower than without the spend. If it is later
// still, nothing is given back.
func RefundSlidingWindow(s State, now int64, p Params, n, at int64) State {
	switch w := windowStart(at, p.Period); s.A {
	case w:
		s.C -= min(n, s.C)
	case w + p.Period:
		s.B -= min(n, s.B)
	}
	return s
}

// RefundSlidingLog gives back a SlidingLog spend of n units made at at: after dropping the
// timestamps that have left the window (as SlidingLog does), it removes the n latest
// timestamps at or before at (fewer if the log holds fewer).
//
// The spend stamped its units max(at, newest held); with a clock that did not step back
// before the spend, that is at, and timestamps after at were stamped by later decisions,
// so the n latest at or before at are the spend's own or equal to them: the refund is
// exact. Timestamps that are equal are interchangeable. Time going backwards: a spend
// stamped later than at is not found; the refund removes earlier timestamps instead,
// which leaves the log holding later ones than without the spend (they leave the window
// later), or removes fewer: never more permissive.
func RefundSlidingLog(l *Log, now int64, p Params, n, at int64) {
	l.expire(now, p.Period)
	end := l.n
	for end > 0 && l.at(end-1) > at {
		end--
	}
	m := int(min(n, int64(end)))
	l.remove(end-m, m)
}

// remove drops the m timestamps from the i-th oldest on.
func (l *Log) remove(i, m int) {
	if m <= 0 {
		return
	}
	for j := i; j+m < l.n; j++ {
		l.ts[(l.head+j)%len(l.ts)] = l.ts[(l.head+j+m)%len(l.ts)]
	}
	l.n -= m
	if l.n == 0 {
		l.head = 0
	}
}
