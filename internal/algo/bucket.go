package algo

// The three bucket algorithms share one admission rule. ITU-T I.371 shows that the virtual
// scheduling algorithm (GCRA) and the continuous-state leaky bucket are equivalent, and a token
// bucket is the same meter read the other way up (tokens = capacity - level). With the same
// Limit they admit exactly the same requests; they differ in what the state records, which is
// what an operator sees in Redis and what the Lua scripts manipulate. All three:
//
//   - space units by the emission interval T = ceil(Period/Rate) µs, so the realised rate is
//     Period/T ≤ Rate (the rounding never admits more; it loses < 1µs per unit);
//   - admit a burst of Burst units at once after a quiet spell of Burst·T, then one unit
//     every T: in any interval of length d at most Burst + ⌊d/T⌋ units, i.e. at most
//     Burst + Rate·d/Period; in an open window of one Period, at most Burst + Rate - 1;
//   - report Remaining = ⌊(Burst·T - level)/T⌋ (whole units that fit now),
//     ResetAfter = level (time until the bucket is back to full / empty), and
//     RetryAfter = level + cost·T - Burst·T when denied, where level is the bucket's
//     fill in microseconds of work.

// GCRA is the generic cell rate algorithm in its virtual-scheduling form.
//
// State: A = TAT, the theoretical arrival time (µs) of the next unit if the key sent at
// exactly the rate. A TAT at or before now means a full allowance. Tolerance is
// (Burst-1)·T: a cost of n is allowed at now when max(TAT, now) + n·T - Burst·T ≤ now, and
// then TAT becomes max(TAT, now) + n·T.
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
