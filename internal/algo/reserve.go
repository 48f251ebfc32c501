package algo

import "github.com/sluicehq/sluice"

// Reservations: pacing instead of rejecting.
//
// A reservation spends n units now for use at a later instant, the earliest at which the
// algorithm would have admitted them: Reserve answers "when may I go?" rather than "may I
// go now?". The bucket machine (GCRA, under all three names), the one that can reserve,
// obeys one rule, which the tests check:
//
//   - the delay of a reservation is exactly the RetryAfter that AllowN would report from the
//     same state at the same now (0 when AllowN would allow), and
//   - the state after it is exactly the state that AllowN(now+Delay, n) would leave.
//
// So a fleet that acts only at the reserved instants sends a stream the algorithm would have
// admitted request by request: Burst at once after a quiet spell, then one unit every
// Period/Rate, i.e. at most Burst + ⌊(d-1)·S/U⌋ units in any open interval of length d.
// Reservations, plain AllowN decisions and cancellations may be mixed on one key.
//
// A reservation that waits records a TAT in the future, which later decisions read as they
// read a clock step back. The window algorithms cannot reserve: they have no notion of a
// future slot.

// Reservation is the outcome of ReserveGCRA, in microseconds.
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

// CanReserve reports whether limits of algorithm a can be reserved: the names of the
// bucket machine, GCRA, TokenBucket and LeakyBucket.
func CanReserve(a sluice.Algorithm) bool {
	return a == sluice.GCRA || a == sluice.TokenBucket || a == sluice.LeakyBucket
}

// ReserveGCRA reserves n units under the bucket machine (GCRA, TokenBucket and
// LeakyBucket; state as in GCRA: TAT = A - B/S).
//
// With tat = max(TAT, now), the units may be used at at = max(now, tat + (n·U -
// Burst·U)/S) (rounded up to a whole µs), and TAT becomes max(tat, at) + n·U/S whether or
// not they wait: the reservation takes the next n emission slots (max(tat, at) differs
// from tat only by the part of a µs the rounding of at adds, when at reaches TAT's own
// µs). maxWait < 0 means no bound; otherwise a delay above maxWait refuses the reservation
// and leaves the state unchanged. n == 0 reserves nothing: OK with Delay 0. The caller
// validates 0 ≤ n ≤ Burst, so the delay never exceeds ⌈TAT - now⌉: a reservation never
// waits longer than the key's current backlog.
//
// Time going backwards (now before a TAT written later) is handled as in GCRA: the delay
// is measured from now, so it includes the time until the clock catches up.
func ReserveGCRA(s State, now int64, p Params, n, maxWait int64) (State, Reservation) {
	r := Reservation{OK: true, At: now, Before: s, After: s}
	if n == 0 {
		return s, r
	}
	ta, tb := tatFrom(s, now)
	na, nb := advance(ta, tb, n*p.U, p.S)
	delay := nonNeg(na - now - (nb+p.Burst*p.U)/p.S)
	r.Delay, r.At = delay, now+delay
	if maxWait >= 0 && delay > maxWait {
		r.OK = false
		return s, r
	}
	if delay > 0 && s.A <= r.At {
		// The delay, rounded up to a whole µs, reaches the TAT's own µs: GCRA deciding at
		// that instant starts from it rather than from the TAT a fraction earlier.
		na, nb = advance(r.At, 0, n*p.U, p.S)
	}
	s = State{A: na, B: nb}
	r.After = s
	return s, r
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
// golang.org/x/time/rate, whose partial return in the second case schedules newcomers into
// slots that later reservations hold; this rule keeps every schedule exactly as if the
// cancelled reservation had never been made.
func CancelReservation(s State, now int64, r Reservation) (State, bool) {
	if !r.OK || r.After == r.Before || now >= r.At || s != r.After {
		return s, false
	}
	return r.Before, true
}
