package algo

// windowStart is the start of the Period-long window holding now: a multiple of Period since
// the Unix epoch (so a 24h window is a UTC day, whatever the local zone).
func windowStart(now, period int64) int64 { return floorDiv(now, period) * period }

// slide moves a sliding window's state s (A = the current window's start, B = the
// previous window's units, C = the current one's) on to now's window of length P: the
// next window keeps the current count as the previous one, a later one starts from
// nothing. A now in s's window, or before it (time went backwards), leaves s as it is.
func slide(s State, now, P int64) State {
	switch w := windowStart(now, P); {
	case w == s.A+P:
		return State{A: w, B: s.C}
	case w > s.A+P:
		return State{A: w}
	}
	return s
}

// FixedWindow counts units in windows [k·Period, (k+1)·Period) since the Unix epoch.
//
// State: A = the start of the window counted (µs), B = the units admitted in it. A cost n is
// allowed when B + n ≤ Rate. There is no rounding (Rate units per window exactly), and
// Burst is not used: the window's capacity, and the largest cost, is Rate.
//
// Remaining = Rate - B. ResetAfter = the time to the window's end (0 when nothing is
// counted). RetryAfter = the time to the window's end, where the count restarts at 0.
//
// Error bound: up to 2·Rate in an interval of length Period — Rate at the end of one window
// and Rate at the start of the next — which is exactly what clients synchronised to wall
// clock boundaries produce.
//
// If now falls in a window before A (time went backwards), the count of A's window applies.
func FixedWindow(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	if w := windowStart(now, p.Period); w > s.A {
		s = State{A: w}
	}
	untilEnd := s.A + p.Period - now
	if s.B+c > p.Rate {
		return s, Result{
			Remaining:  p.Rate - s.B,
			ResetAfter: untilEnd,
			RetryAfter: untilEnd,
		}
	}
	if n > 0 {
		s.B += c
	}
	r := Result{Allowed: true, Remaining: p.Rate - s.B}
	if s.B > 0 {
		r.ResetAfter = untilEnd
	}
	return s, r
}

// SlidingWindow is the sliding window counter: it keeps the counts of the current and the
// previous fixed window and estimates the units in the sliding window (now-Period, now] as
//
//	⌊prev·(Period-e-1)/Period⌋ + cur,   e = now - start of the current window
//
// This is the formula Cloudflare describes, prev·(Period-e)/Period + cur, made exact on a
// microsecond grid: Period-e-1 is the number of the previous window's microseconds that lie
// inside (now-Period, now], and the previous window contributes whole units only. With it a
// client sending at exactly the limit is never denied (the continuous formula denies it at
// every event, counting the unit that left the window one Period ago). A cost n is allowed
// when estimate + n ≤ Rate.
//
// State: A = the start of the current window, B = prev, C = cur. Burst is not used: the
// window's capacity, and the largest cost, is Rate.
//
// Remaining = Rate - estimate. ResetAfter = until the estimate is back to 0 for good (the
// weight of the last counted window has decayed below one unit). RetryAfter is exact: the
// earliest instant at which the decaying weight of the previous window (or, when cur itself
// is too full, of the current one, a window later) leaves room for n, found with ceiling
// divisions that are exact in both Go and Lua.
//
// Error bound: the estimate assumes the previous window's units were spread evenly. Against
// an exact sliding window it admits at most 2·Rate in an interval of length Period (all of
// the previous window's units bunched at its end, then Rate more); for traffic that is not
// bunched at window edges it is close: the simulator (package sim) measures it.
//
// If now is before the current window (time went backwards), e is taken as 0: the previous
// window weighs in fully.
func SlidingWindow(s State, now int64, p Params, n int64) (State, Result) {
	c := cost(n)
	P := p.Period
	s = slide(s, now, P)
	e := min(nonNeg(now-s.A), P-1)
	weighted := MulDiv(s.B, P-e-1, P)
	if weighted+s.C+c > p.Rate {
		var at int64
		if x := p.Rate - s.C - c; x >= 0 {
			// Room appears in this window once ⌊prev·(P-e-1)/P⌋ ≤ x.
			at = s.A + P - MulDivCeil(x+1, P, s.B)
		} else {
			// cur alone is too full: wait for the next window, where cur becomes prev.
			at = s.A + 2*P - MulDivCeil(p.Rate-c+1, P, s.C)
		}
		return s, Result{
			Remaining:  nonNeg(p.Rate - weighted - s.C),
			ResetAfter: nonNeg(slidingFullAt(s, P) - now),
			RetryAfter: at - now,
		}
	}
	if n > 0 {
		s.C += c
	}
	return s, Result{
		Allowed:    true,
		Remaining:  nonNeg(p.Rate - weighted - s.C),
		ResetAfter: nonNeg(slidingFullAt(s, P) - now),
	}
}

// slidingFullAt is the instant from which a SlidingWindow state estimates 0 for good: the
// weight of its last non-empty window has fallen below one unit.
func slidingFullAt(s State, P int64) int64 {
	switch {
	case s.C > 0:
		return s.A + 2*P - (P+s.C-1)/s.C
	case s.B > 0:
		return s.A + P - (P+s.B-1)/s.B
	}
	return 0
}
