package algo

import "github.com/sluicehq/sluice"

// Reservations: pacing instead of rejecting.
//
// A reservation spends n units now for use at a later instant, the earliest at which the
// algorithm would have admitted them: Reserve answers "when may I go?" rather than "may I
// go now?". Both reservable algorithms obey one rule, which the tests check:
//
//   - the delay of a reservation is exactly the RetryAfter that AllowN would report from the
//     same state at the same now (0 when AllowN would allow), and
//   - the state after it is exactly the state that AllowN(now+Delay, n) would leave.
//
// So a fleet that acts only at the reserved instants sends a stream the algorithm would have
// admitted request by request: Burst at once after a quiet spell, then one unit every T,
// i.e. at most Burst + ⌊(d-1)/T⌋ units in any open interval of length d. Reservations,
// plain AllowN decisions and cancellations may be mixed on one key.
//
// The other four algorithms cannot reserve: TokenBucket would need credit below zero, and
// the window algorithms have no notion of a future slot.

// Reservation is the outcome of ReserveGCRA or ReserveLeakyBucket, in microseconds.
type Reservation struct {
	// OK reports whether the units were reserved (and spent). A refusal spends nothing.
	OK bool
	// Delay is the time from now until the units may be used: 0 when they may be used at
	// once. For a refusal it is the delay the reservation would have had.
	Delay int64
	// At is now + Delay, the instant the units are used, on the clock that decided.
	At int64
	// Before and After are the key's state before and after the reservation, which
	// CancelReservation needs. They are equal when nothing was spent (a refusal, n == 0).
	Before, After State
}

// CanReserve reports whether a has reservation functions (GCRA and LeakyBucket).
func CanReserve(a sluice.Algorithm) bool { return a == sluice.GCRA || a == sluice.LeakyBucket }

// Reserve runs ReserveGCRA or ReserveLeakyBucket for p.Algo. It must not be called for
// other algorithms (see CanReserve).
func Reserve(s State, now int64, p Params, n, maxWait int64) (State, Reservation) {
	if p.Algo == sluice.LeakyBucket {
		return ReserveLeakyBucket(s, now, p, n, maxWait)
	}
	return ReserveGCRA(s, now, p, n, maxWait)
}

// ReserveGCRA reserves n units under GCRA (state as in GCRA: A = TAT).
//
// With tat = max(TAT, now), the units may be used at max(now, tat + n·T - Burst·T), and
// TAT becomes tat + n·T whether or not they wait: the reservation takes the next n
// emission slots. maxWait < 0 means no bound; otherwise a delay above maxWait refuses the
// reservation and leaves the state unchanged. n == 0 reserves nothing: OK with Delay 0.
// The caller validates 0 ≤ n ≤ Burst, so the delay never exceeds TAT - now + T·n - Burst·T
// ≤ TAT - now: a reservation never waits longer than the key's current backlog.
//
// Time going backwards (now before a TAT written later) is handled as in GCRA: the delay
// is measured from now, so it includes the time until the clock catches up.
func ReserveGCRA(s State, now int64, p Params, n, maxWait int64) (State, Reservation) {
	r := Reservation{OK: true, At: now, Before: s, After: s}
	if n == 0 {
		return s, r
	}
	tat := max64(s.A, now)
	newTAT := tat + n*p.T
	delay := nonNeg(newTAT - p.Burst*p.T - now)
	r.Delay, r.At = delay, now+delay
	if maxWait >= 0 && delay > maxWait {
		r.OK = false
		return s, r
	}
	s.A = newTAT
	r.After = s
	return s, r
}

// ReserveLeakyBucket reserves n units under LeakyBucket (state as in LeakyBucket: A = X,
// the level in µs of work, B = LCT, the last conformance time).
//
// With last = max(LCT, now) and level = max(0, X - max(0, now-LCT)) (the level at last),
// let over = level + n·T - Burst·T. If over ≤ 0 the units fit at once: X = level + n·T,
// LCT = last, as LeakyBucket does. Otherwise they fit when the bucket has drained by over
// after last: they may be used at last + over, and the state becomes X = Burst·T (full at
// that instant), LCT = last + over, a conformance time in the future. Later decisions
// before that instant see a bucket that has not yet started to drain, which is exactly
// the backlog. maxWait and n == 0 are as in ReserveGCRA.
func ReserveLeakyBucket(s State, now int64, p Params, n, maxWait int64) (State, Reservation) {
	r := Reservation{OK: true, At: now, Before: s, After: s}
	if n == 0 {
		return s, r
	}
	bt := p.Burst * p.T
	last := max64(s.B, now)
	level := nonNeg(s.A - nonNeg(now-s.B))
	next := State{A: level + n*p.T, B: last}
	if over := next.A - bt; over > 0 {
		next = State{A: bt, B: last + over}
		r.Delay = last + over - now
		r.At = last + over
	}
	if maxWait >= 0 && r.Delay > maxWait {
		r.OK = false
		return s, r
	}
	r.After = next
	return next, r
}

// CancelReservation gives r's units back if the algorithm allows, and reports whether it
// did. It undoes r exactly, restoring r.Before, when both hold:
//
//   - r's instant has not come: now < r.At (a reservation with Delay 0 is used at once
//     and can never be given back), and
//   - nothing has been spent on the key since: its state is still r.After. A later
//     decision or reservation took the slots after r's; giving r's back would leave a hole
//     that a single TAT (or level) cannot represent.
//
// Otherwise the state is unchanged and nothing is given back. This is stricter than
// golang.org/x/time/rate, which in the second case gives back the part of r not overtaken
// (n minus the units reserved after it). That partial return schedules newcomers into
// emission slots that later reservations already hold (two units in one slot, drawing on
// the burst allowance); the rule here keeps every schedule exactly as if the cancelled
// reservation had never been made, which a store can check with one comparison (the Lua
// script does) and a test can state exactly.
func CancelReservation(s State, now int64, r Reservation) (State, bool) {
	if !r.OK || r.After == r.Before || now >= r.At || s != r.After {
		return s, false
	}
	return r.Before, true
}
