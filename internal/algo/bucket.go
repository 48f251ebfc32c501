package algo

// GCRA is the generic cell rate algorithm in its virtual-scheduling form.
//
// State: A = TAT, the theoretical arrival time (µs) of the next unit if the key sent at
// exactly the rate. A TAT at or before now means a full allowance. Tolerance is
// (Burst-1)·T: a cost of n is allowed at now when max(TAT, now) + n·T - Burst·T ≤ now, and
// then TAT becomes max(TAT, now) + n·T.
//
// Remaining = ⌊(now + Burst·T - max(TAT, now))/T⌋. ResetAfter = max(TAT, now) - now, the
// time until a full allowance. RetryAfter (denied) = max(TAT, now) + n·T - Burst·T - now,
// exact: the same cost is allowed then and denied 1 µs earlier.
//
// Rounding: units are spaced by the emission interval T = ceil(Period/Rate) µs
// (Params.T), so the realised rate Period/T is at most Rate; the rounding never admits
// more and loses less than 1 µs per unit.
//
// Burst: Burst units at once after a quiet spell of Burst·T, then one unit every T.
//
// Error bound against an exact sliding window: in any interval of length d at most
// Burst + ⌊d/T⌋ units, so at most Burst + Rate·d/Period, and at most Burst + Rate - 1 in an
// open window of one Period (2·Rate - 1 with the default Burst = Rate), reached only by a
// full burst after a quiet spell. GCRA, TokenBucket and LeakyBucket admit exactly the same
// requests for the same Limit (ITU-T I.371: virtual scheduling and the continuous-state
// leaky bucket are equivalent, and a token bucket is the meter read the other way up);
// they differ in what the state records.
//
// Time going backwards leaves TAT ahead of now, which only shrinks the allowance.
func GCRA(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	bt := p.Burst * p.T
	tat := max64(s.A, now)
	newTAT := tat + c*p.T
	if allowAt := newTAT - bt; allowAt > now {
		return s, Result{
			Remaining:  nonNeg(floorDiv(now+bt-tat, p.T)),
			ResetAfter: tat - now,
			RetryAfter: allowAt - now,
		}
	}
	if n > 0 {
		s.A, tat = newTAT, newTAT
	}
	return s, Result{
		Allowed:    true,
		Remaining:  nonNeg(floorDiv(now+bt-tat, p.T)),
		ResetAfter: tat - now,
	}
}

// TokenBucket is a bucket of Burst tokens refilled continuously at one token per T.
//
// State: A = credit, the tokens held at time B measured in microseconds of refill (one
// token = T µs, so fractional tokens are exact to 1µs; 0 ≤ A ≤ Burst·T); B = the time of the
// last spend. The zero State is a full bucket. At now the credit is min(Burst·T,
// A + (now-B)); a cost n is allowed when credit ≥ n·T, and spends n·T of it.
//
// Remaining = ⌊credit/T⌋. ResetAfter = Burst·T - credit, the time until the bucket is full
// again. RetryAfter (denied) = n·T - credit, exact as for GCRA. When time went backwards
// both also wait out B - now.
//
// Rounding: units are spaced by the emission interval T = ceil(Period/Rate) µs
// (Params.T), so the realised rate Period/T is at most Rate; the rounding never admits
// more and loses less than 1 µs per unit.
//
// Burst: Burst units at once after a quiet spell of Burst·T, then one unit every T.
//
// Error bound against an exact sliding window: in any interval of length d at most
// Burst + ⌊d/T⌋ units, so at most Burst + Rate·d/Period, and at most Burst + Rate - 1 in an
// open window of one Period (2·Rate - 1 with the default Burst = Rate), reached only by a
// full burst after a quiet spell. GCRA, TokenBucket and LeakyBucket admit exactly the same
// requests for the same Limit (ITU-T I.371: virtual scheduling and the continuous-state
// leaky bucket are equivalent, and a token bucket is the meter read the other way up);
// they differ in what the state records.
//
// If now is before B (time went backwards) no refill is counted until B.
func TokenBucket(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	bt := p.Burst * p.T
	credit, last := bt, now
	if s != (State{}) {
		last = max64(s.B, now)
		credit = min64(bt, s.A+nonNeg(now-s.B))
	}
	wait := last - now // > 0 only when time went backwards
	need := c * p.T
	if credit < need {
		return s, Result{
			Remaining:  credit / p.T,
			ResetAfter: wait + bt - credit,
			RetryAfter: wait + need - credit,
		}
	}
	if n > 0 {
		credit -= need
		s = State{A: credit, B: last}
	}
	return s, Result{
		Allowed:    true,
		Remaining:  credit / p.T,
		ResetAfter: wait + bt - credit,
	}
}

// LeakyBucket is the leaky bucket as a meter (ITU-T I.371's continuous-state leaky bucket).
//
// State: A = X, the bucket's level in microseconds of work (a unit adds T, and the level
// drains one µs per µs; 0 ≤ X ≤ Burst·T); B = LCT, the last conformance time. At now the
// level is X' = max(0, X - (now-LCT)); a cost n is allowed when X' + n·T ≤ Burst·T, and then
// X = X' + n·T, LCT = now.
//
// Remaining = ⌊(Burst·T - X')/T⌋. ResetAfter = X', the time until the bucket is empty.
// RetryAfter (denied) = X' + n·T - Burst·T, exact as for GCRA. When time went backwards
// both also wait out LCT - now.
//
// Rounding: units are spaced by the emission interval T = ceil(Period/Rate) µs
// (Params.T), so the realised rate Period/T is at most Rate; the rounding never admits
// more and loses less than 1 µs per unit.
//
// Burst: Burst units at once after a quiet spell of Burst·T, then one unit every T.
//
// Error bound against an exact sliding window: in any interval of length d at most
// Burst + ⌊d/T⌋ units, so at most Burst + Rate·d/Period, and at most Burst + Rate - 1 in an
// open window of one Period (2·Rate - 1 with the default Burst = Rate), reached only by a
// full burst after a quiet spell. GCRA, TokenBucket and LeakyBucket admit exactly the same
// requests for the same Limit (ITU-T I.371: virtual scheduling and the continuous-state
// leaky bucket are equivalent, and a token bucket is the meter read the other way up);
// they differ in what the state records.
//
// If now is before LCT (time went backwards) nothing drains until LCT.
func LeakyBucket(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	bt := p.Burst * p.T
	last := max64(s.B, now)
	level := nonNeg(s.A - nonNeg(now-s.B))
	wait := last - now
	need := c * p.T
	if level+need > bt {
		return s, Result{
			Remaining:  (bt - level) / p.T,
			ResetAfter: wait + level,
			RetryAfter: wait + level + need - bt,
		}
	}
	if n > 0 {
		level += need
		s = State{A: level, B: last}
	}
	return s, Result{
		Allowed:    true,
		Remaining:  (bt - level) / p.T,
		ResetAfter: wait + level,
	}
}

// cost is the cost a call is evaluated at: n, or 1 for a look (n == 0).
func cost(n int64) int64 {
	if n == 0 {
		return 1
	}
	return n
}
