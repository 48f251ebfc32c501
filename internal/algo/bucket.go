package algo

// GCRA is the generic cell rate algorithm in its virtual-scheduling form, and the one
// state machine of the three bucket names: Decide runs it for sluice.GCRA,
// sluice.TokenBucket and sluice.LeakyBucket alike. A token bucket of Burst tokens refilled
// at Rate per Period and a leaky bucket (ITU-T I.371's continuous-state meter) of depth
// Burst drained at that rate admit exactly the requests GCRA admits: the token bucket is
// full, and the leaky bucket empty, at GCRA's TAT, and a token bucket's tokens at now are
// ⌊(Burst·U - (TAT - now)·S)/U⌋, Remaining below. The names remain so that configurations
// and callers keep their words; what each bucket would record is a function of the TAT.
//
// State: the theoretical arrival time (TAT) of the next unit if the key sent at exactly the
// rate, TAT = A - B/S µs: A is the TAT rounded up to a whole µs and B ∈ [0, S) the part
// below it (always 0 when S = 1, so that state is one word). A TAT at or before now means a
// full allowance. A cost of n is allowed at now when max(TAT, now) + (n·U - Burst·U)/S ≤
// now, and TAT then becomes max(TAT, now) + n·U/S.
//
// Remaining = ⌊(Burst·U - (max(TAT, now) - now)·S)/U⌋. ResetAfter = ⌈max(TAT, now) -
// now⌉, the time until a full allowance. RetryAfter (denied) = ⌈max(TAT, now) +
// (n·U - Burst·U)/S - now⌉.
//
// Rounding: none in the state, which counts in units of 1/S µs (Params, and its fallback
// to whole µs). Results are rounded up to whole µs, so they are exact at the µs grid:
// allowed at now+RetryAfter and denied 1µs earlier, empty at now+ResetAfter (ExpiresAt)
// and not 1µs earlier.
//
// Burst: Burst units at once after a quiet spell of Burst·Period/Rate, then one unit every
// Period/Rate. A client sending exactly Rate units per Period, spread out or (with Burst ≥
// Rate, the default) in a burst at the start of each Period, is never denied.
//
// Error bound against an exact sliding window: in any interval of length d (µs) at most
// Burst + ⌊d·Rate/Period⌋ units (⌊d/T⌋ under the fallback), so at most Burst +
// Rate·d/Period, and at most Burst + Rate - 1 in an open window of one Period (2·Rate - 1
// with the default Burst = Rate), reached only by a full burst after a quiet spell.
//
// Time going backwards leaves TAT ahead of now, which only shrinks the allowance: read as
// a token or leaky bucket, the refill or drain between now and the later instant the state
// was written at has not yet come.
func GCRA(s State, now int64, p Params, n int64) (State, Result) {
	if p.S != 1 {
		return gcraFrac(s, now, p, n)
	}
	// S = 1: TAT is a whole µs (B stays 0) and U the emission interval: no division by S.
	next, ok := GCRAStep(s.A, now, &p, cost(n))
	switch {
	case !ok:
		r := GCRAAllowed(max(s.A, now), now, &p) // the state as it stands
		r.Allowed, r.RetryAfter = false, next-p.Burst*p.U-now
		return s, r
	case n == 0:
		return s, GCRAAllowed(max(s.A, now), now, &p)
	}
	s.A = next
	return s, GCRAAllowed(next, now, &p)
}

// GCRAStep is GCRA's admission alone, for a limit with S = 1 and a cost n > 0: the TAT a
// spend of n at now leaves, and whether it is allowed (if not, the state is unchanged).
// With GCRAAllowed it splits GCRA so that a caller updating the TAT by compare-and-swap
// keeps the divisions out of the window between its load and its swap:
// GCRA(State{A: tat}, now, p, n) is (State{A: next}, GCRAAllowed(next, now, &p)) when ok.
func GCRAStep(tat, now int64, p *Params, n int64) (next int64, ok bool) {
	next = max(tat, now) + n*p.U
	return next, next-p.Burst*p.U <= now
}

// GCRAAllowed is the Result of an allowed GCRA spend that left the TAT next (S = 1); with
// the TAT as it stands, that of an allowed look, and a denial's but for Allowed and
// RetryAfter.
func GCRAAllowed(next, now int64, p *Params) Result {
	return Result{
		Allowed:    true,
		Remaining:  nonNeg(floorDiv(now+p.Burst*p.U-next, p.U)),
		ResetAfter: next - now,
	}
}

// GCRAFresh is GCRA(State{}, now, *p, n) in closed form, for a key with no state, a limit
// with S = 1 and a now at or after the epoch.
// A fresh key has a full allowance: a cost n ≤ Burst is allowed, leaving the TAT now + n·U,
// Remaining Burst - n and ResetAfter n·U; a larger cost is denied with Remaining Burst and
// RetryAfter (n - Burst)·U. Rounding and error bound are GCRA's (with S = 1 nothing
// rounds); with no TAT, a clock stepping back changes nothing.
func GCRAFresh(now int64, p *Params, n int64) (State, Result) {
	switch {
	case n > p.Burst:
		return State{}, Result{Remaining: p.Burst, RetryAfter: (n - p.Burst) * p.U}
	case n == 0:
		return State{}, Result{Allowed: true, Remaining: p.Burst}
	}
	return State{A: now + n*p.U}, Result{Allowed: true, Remaining: p.Burst - n, ResetAfter: n * p.U}
}

// GCRAHolding is the bucket machine's state, at now, of a bucket that holds credit
// (in units of 1/S µs, one unit of cost being U; at most Burst·U): a token bucket with that
// many tokens, or a leaky bucket with that much room, is full again (Burst·U -
// credit)/S µs after now, which is its TAT. A credit of Burst·U or more is the zero State,
// a full bucket. Rounding: none (TAT = A - B/S exactly). It lets a caller that changes a
// bucket's depth (region) carry what the bucket holds across the change.
func GCRAHolding(now, credit int64, p Params) State {
	if missing := p.Burst*p.U - credit; missing > 0 {
		a, b := advance(now, 0, missing, p.S)
		return State{A: a, B: b}
	}
	return State{}
}

// gcraFrac is GCRA when S > 1: the TAT has a part below 1µs.
func gcraFrac(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	bt := p.Burst * p.U
	ta, tb := tatFrom(s, now)
	na, nb := advance(ta, tb, c*p.U, p.S)
	if late := na - now - (nb+bt)/p.S; late > 0 {
		return s, Result{
			Remaining:  gcraRemaining(ta-now, tb, bt, p),
			ResetAfter: ta - now,
			RetryAfter: late,
		}
	}
	if n > 0 {
		s, ta, tb = State{A: na, B: nb}, na, nb
	}
	return s, Result{
		Allowed:    true,
		Remaining:  gcraRemaining(ta-now, tb, bt, p),
		ResetAfter: ta - now,
	}
}

// tatFrom returns max(TAT, now) of GCRA state s as a whole µs rounded up and the part
// below it (TAT = ta - tb/S).
func tatFrom(s State, now int64) (ta, tb int64) {
	if s.A > now {
		return s.A, s.B
	}
	return now, 0
}

// advance returns the time a - b/S + k/S (k > 0) as a whole µs rounded up and the part
// below it, in [0, S).
func advance(a, b, k, S int64) (int64, int64) {
	k -= b
	q := (k + S - 1) / S
	return a + q, q*S - k
}

// gcraRemaining is ⌊(bt - lead)/U⌋, at least 0, where lead = ahead·S - frac is how far the
// TAT is ahead of now in units of 1/S µs. A TAT more than the whole tolerance ahead (time
// went backwards) leaves nothing, without computing a lead that could overflow.
func gcraRemaining(ahead, frac, bt int64, p Params) int64 {
	if ahead > bt/p.S+1 {
		return 0
	}
	return nonNeg(floorDiv(bt-(ahead*p.S-frac), p.U))
}

// cost is the cost a call is evaluated at: n, or 1 for a look (n == 0).
func cost(n int64) int64 {
	if n == 0 {
		return 1
	}
	return n
}
