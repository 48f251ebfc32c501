// Package share computes a share of a limit in integers, for every part of sluice that
// divides one: failover's local limiter (a node's share while the store is down) and
// package region (a region's fixed share, and a node's share of a global limit).
//
// A share is in parts per million of the whole limit (PPM), 1 ≤ ppm ≤ Whole. A fraction
// written in a configuration (0.29, 1/expected_nodes) becomes parts per million once, by
// FromFraction; everything after is integer arithmetic, so a
// share gives the same limit in every package and on every machine.
package share

import (
	"math"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Whole is the whole limit, in parts per million.
const Whole = 1_000_000

// FromFraction returns the fraction f as parts per million. A fraction of at most six
// decimal places (0.29, 0.125) is exact. Any other (1/3, 1/7) rounds up to the next part
// per million, so that the share of a multiple of N under 1/N is exact (a third of 9 is
// 3); N such shares then sum to less than Whole + N, and over v units they exceed v only
// when v·N ≥ Whole, by at most one unit per share. f outside (0, 1], or below half a part
// per million, gives 0 (no share).
func FromFraction(f float64) int64 {
	x := f * Whole
	if !(x >= 0.5 && f <= 1) {
		return 0
	}
	if r := math.Round(x); math.Abs(x-r) < 1e-6 {
		return int64(r)
	}
	return int64(math.Ceil(x))
}

// Of returns ppm parts per million of v units: ⌊v·ppm/Whole⌋, rounded down so that shares
// summing to at most Whole never sum to more than v, but at least 1 when v ≥ 1, so that a
// share can always admit one unit (with shares of a small v, their sum may then exceed v
// by at most one unit per share). ppm ≤ 0 gives 0; ppm ≥ Whole gives v. The product
// never overflows.
func Of(v, ppm int64) int64 {
	switch {
	case ppm <= 0 || v <= 0:
		return 0
	case ppm >= Whole:
		return v
	}
	return max(1, algo.MulDiv(v, ppm, Whole))
}

// Limit returns ppm parts per million of l: Rate, and Burst when set, each scaled by Of;
// Algorithm, Period and the rest are kept. A share of Whole or more, or of 0 or less
// (none given), returns l unchanged.
func Limit(l sluice.Limit, ppm int64) sluice.Limit {
	if ppm <= 0 || ppm >= Whole {
		return l
	}
	l.Rate = Of(l.Rate, ppm)
	if l.Burst > 0 {
		l.Burst = Of(l.Burst, ppm)
	}
	return l
}
