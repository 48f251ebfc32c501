package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Bounds are four consecutive calendar period starts in µs, b[0] < b[1] < b[2] < b[3]:
// the periods [b[0], b[1]), [b[1], b[2]) and [b[2], b[3]). CalendarWindow decides in the
// one holding now, so bounds computed on one clock serve a decision on another that is
// less than a period away (Redis's, see redisstore).
type Bounds [4]int64

// BoundsAt returns the bounds around t for calendar c: the period holding t is
// [b[1], b[2]). c must pass Validate.
func BoundsAt(c sluice.Calendar, t int64) Bounds {
	start, end := c.Bounds(time.UnixMicro(t))
	prev, _ := c.Bounds(start.Add(-time.Microsecond))
	_, next := c.Bounds(end)
	return Bounds{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// Holding returns the period of b holding now: [b[0], b[1]) for any now before b[1].
func (b Bounds) Holding(now int64) (start, end int64) {
	switch {
	case now >= b[2]:
		return b[2], b[3]
	case now >= b[1]:
		return b[1], b[2]
	}
	return b[0], b[1]
}

// Window is the length of the period of b holding now, which a decision at now reports
// (Outcome.Window).
func (b Bounds) Window(now int64) int64 {
	w, e := b.Holding(now)
	return e - w
}

// Holds reports whether now lies in one of b's periods, b[0] ≤ now < b[3].
func (b Bounds) Holds(now int64) bool { return b[0] <= now && now < b[3] }

// CalendarWindow is FixedWindow over calendar periods: it counts units in the period of b
// holding now (see Bounds; callers guarantee b.Holds(now)).
//
// State: A = the start of the period counted (µs), B = the units admitted in it, C = its
// end. A cost n is allowed when B + n ≤ Rate; there is no rounding, and Burst is not used.
//
// Remaining = Rate - B. ResetAfter = RetryAfter (for a denial) = the time to the end of
// the period, C - now: exactly the next period start, whatever the month's length or the
// zone's DST changes. Unlike FixedWindow, ResetAfter is that time even when nothing is
// counted, since a quota's reset is a calendar instant a client plans by.
//
// Error bound: as FixedWindow's, up to 2·Rate around a period start.
//
// If now falls before the period of A (time went backwards), A's period and count apply.
func CalendarWindow(s State, now int64, p Params, b Bounds, n int64) (State, Result) {
	c := cost(n)
	w, e := b.Holding(now)
	if w > s.A {
		s = State{A: w, C: e}
	}
	untilEnd := s.C - now
	if s.B+c > p.Rate {
		return s, Result{Remaining: p.Rate - s.B, ResetAfter: untilEnd, RetryAfter: untilEnd}
	}
	if n > 0 {
		s.B += c
	}
	return s, Result{Allowed: true, Remaining: p.Rate - s.B, ResetAfter: untilEnd}
}

// RefundCalendarWindow gives back a CalendarWindow spend of n units made at at: if the
// state still counts at's period (A ≤ at < C), its count falls by n (not below 0);
// otherwise the spend no longer counts and nothing is given back. Exact, no rounding.
func RefundCalendarWindow(s State, p Params, n, at int64) State {
	if at < s.A || at >= s.C || s.B == 0 {
		return s
	}
	s.B -= min(n, s.B)
	return s
}
