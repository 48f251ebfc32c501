package sim

import (
	"math"

	"github.com/sluicehq/sluice/internal/algo"
)

// Estimate measures the sliding window counter as a rate estimator on a pattern's raw
// traffic, the way Cloudflare measured theirs: every request counts (blocked or not), and at
// each request the estimated number of requests in the last Period, this one included, is
// compared with the exact number. A request is decided wrongly when exactly one of the two
// exceeds the threshold (the pattern's Rate): a wrong allow when the estimate is within it
// and the exact count is not, a wrong deny the reverse.
//
// This isolates the estimator from the limiter's feedback (a limiter admitting or denying
// changes what it counts next); Result's false_allow_rate and false_deny_rate measure the
// limiter end to end instead.
type Estimate struct {
	Pattern  string `json:"pattern"`
	Requests int64  `json:"requests"`
	Keys     int    `json:"keys"`
	// Discrete is sluice's formula, ⌊prev·(Period-e-1)/Period⌋ + cur (see
	// sluice.SlidingWindow).
	Discrete EstimatorAccuracy `json:"discrete"`
	// Continuous is the formula as Cloudflare published it, prev·(Period-e)/Period + cur,
	// in floating point.
	Continuous EstimatorAccuracy `json:"continuous"`
	// NearThreshold is the share of requests whose exact count exceeds half the threshold:
	// only there can an estimator with a few percent of error decide wrongly, so the wrong
	// rate scales with it. Traffic far below the threshold is never misjudged.
	NearThreshold float64 `json:"near_threshold"`
}

// EstimatorAccuracy is how one estimator fared; see Estimate.
type EstimatorAccuracy struct {
	WrongAllows int64 `json:"wrong_allows"`
	WrongDenies int64 `json:"wrong_denies"`
	// WrongRate is (WrongAllows + WrongDenies) / Requests: Cloudflare's 0.003%.
	WrongRate float64 `json:"wrong_rate"`
	// MeanDifference is the mean over requests of |estimate - exact| / exact: Cloudflare's
	// "average difference between real and approximate rate" (6%).
	MeanDifference float64 `json:"mean_difference"`
}

// estimate computes the Estimate of p's arrivals (for a closed-loop pattern, its demand).
func estimate(p Pattern, arrivals []Arrival) Estimate {
	P := p.Limit.Period.Microseconds()
	R := p.Limit.Rate
	keys := make([]keyState, p.Keys)
	start := Epoch.UnixMicro()
	var near int64
	var disc, cont judged
	for _, a := range arrivals {
		exact, d, c := keys[a.Key].count(start+a.At, P)
		disc.add(exact, d > R, float64(d), R)
		cont.add(exact, c > float64(R), c, R)
		if 2*exact > R {
			near++
		}
	}
	n := int64(len(arrivals))
	out := Estimate{Pattern: p.Name, Requests: n, Keys: p.Keys}
	if n > 0 {
		out.NearThreshold = float64(near) / float64(n)
		out.Discrete = disc.accuracy(n)
		out.Continuous = cont.accuracy(n)
	}
	return out
}

// count records one request at t (µs) on the key, counting every request, and returns the
// exact number of requests in (t-P, t], this one included, and the sliding window
// counter's two estimates of it: sluice's discrete ⌊prev·(P-e-1)/P⌋ + cur and the
// continuous prev·(P-e)/P + cur as Cloudflare published it.
func (k *keyState) count(t, P int64) (exact, discrete int64, continuous float64) {
	exact = k.inWindow(t, P) + 1
	k.win = append(k.win, t)
	k.estimate(t, P, false) // rolls the fixed windows
	k.cur++
	e := t - k.wStart
	discrete = algo.MulDiv(k.prev, P-e-1, P) + k.cur
	continuous = float64(k.prev)*float64(P-e)/float64(P) + float64(k.cur)
	return exact, discrete, continuous
}

// judged accumulates one estimator's verdicts on requests.
type judged struct {
	wrongAllows, wrongDenies int64
	diff                     float64 // sum of |estimate - exact| / exact
}

// add judges one request: the exact count and whether the estimate exceeds the threshold R.
func (j *judged) add(exact int64, over bool, est float64, R int64) {
	j.diff += math.Abs(est-float64(exact)) / float64(exact)
	switch {
	case !over && exact > R:
		j.wrongAllows++
	case over && exact <= R:
		j.wrongDenies++
	}
}

func (j *judged) merge(o judged) {
	j.wrongAllows += o.wrongAllows
	j.wrongDenies += o.wrongDenies
	j.diff += o.diff
}

func (j judged) accuracy(n int64) EstimatorAccuracy {
	if n == 0 {
		return EstimatorAccuracy{}
	}
	return EstimatorAccuracy{j.wrongAllows, j.wrongDenies, float64(j.wrongAllows+j.wrongDenies) / float64(n), j.diff / float64(n)}
}
