package sim

import (
	"math"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Estimate measures the sliding window counter as a rate estimator on a pattern's raw
// traffic, as Cloudflare measured theirs: every request counts (no limiter feeding back,
// unlike Result), and at each request the estimated number of requests in the last Period,
// this one included, is compared with the exact number. A request is decided wrongly when
// exactly one of the two exceeds the threshold (Rate): a wrong allow when the estimate is
// within it and the exact count is not, a wrong deny the reverse.
type Estimate struct {
	Pattern  string `json:"pattern"`
	Requests int64  `json:"requests"`
	Keys     int    `json:"keys"`
	// Discrete is sluice's formula, ⌊prev·(Period-e-1)/Period⌋ + cur (sluice.SlidingWindow);
	// Continuous the formula as Cloudflare published it, prev·(Period-e)/Period + cur.
	Discrete   EstimatorAccuracy `json:"discrete"`
	Continuous EstimatorAccuracy `json:"continuous"`
	// NearThreshold is the share of requests whose exact count exceeds half the threshold,
	// the only ones an estimator a few percent off can misjudge.
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
	P, R := p.Limit.Period.Microseconds(), p.Limit.Rate
	keys := make([]keyState, p.Keys)
	start := Epoch.UnixMicro()
	var near int64
	var j [2]judged
	for _, a := range arrivals {
		exact, est := keys[a.Key].count(start+a.At, P)
		for i := range j {
			j[i].add(exact, est[i], R)
		}
		if 2*exact > R {
			near++
		}
	}
	n := int64(len(arrivals))
	return Estimate{Pattern: p.Name, Requests: n, Keys: p.Keys, NearThreshold: float64(near) / float64(max(n, 1)),
		Discrete: j[0].accuracy(n), Continuous: j[1].accuracy(n)}
}

// count records one request at t (µs) on the key, counting every request, and returns the
// exact number of requests in (t-P, t], this one included, and the sliding window
// counter's two estimates of it (see Estimate): sluice's, and Cloudflare's formula.
func (k *keyState) count(t, P int64) (exact int64, est [2]float64) {
	exact = k.inWindow(t, P) + 1
	k.win = append(k.win, t)
	p := windowCounter(sluice.SlidingWindow, P)
	var r algo.Result
	k.wc, r = algo.SlidingWindow(k.wc, t, p, 1)
	e := t - k.wc.A
	return exact, [2]float64{float64(p.Rate - r.Remaining), float64(k.wc.B)*float64(P-e)/float64(P) + float64(k.wc.C)}
}

// judged accumulates one estimator's verdicts on requests and, for a Population, on
// sources.
type judged struct {
	wrongAllows, wrongDenies int64
	diff                     float64 // sum of |estimate - exact| / exact

	exceeded, missed, flagged, falseFlagged int
	missedPeak                              int64 // the largest exact count among missed sources
}

// add judges one request: its exact count against the estimate est, with threshold R.
func (j *judged) add(exact int64, est float64, R int64) {
	j.diff += math.Abs(est-float64(exact)) / float64(exact)
	switch over := est > float64(R); {
	case !over && exact > R:
		j.wrongAllows++
	case over && exact <= R:
		j.wrongDenies++
	}
}

// addSource judges one source: whether its exact count and its estimate ever exceeded
// the threshold, and its peak exact count.
func (j *judged) addSource(exceeded, flagged bool, peak int64) {
	if exceeded {
		j.exceeded++
		if !flagged {
			j.missed++
			j.missedPeak = max(j.missedPeak, peak)
		}
	}
	if flagged {
		j.flagged++
		if !exceeded {
			j.falseFlagged++
		}
	}
}

func (j *judged) merge(o judged) {
	j.wrongAllows += o.wrongAllows
	j.wrongDenies += o.wrongDenies
	j.diff += o.diff
	j.exceeded += o.exceeded
	j.missed += o.missed
	j.flagged += o.flagged
	j.falseFlagged += o.falseFlagged
	j.missedPeak = max(j.missedPeak, o.missedPeak)
}

func (j judged) accuracy(n int64) EstimatorAccuracy {
	if n == 0 {
		return EstimatorAccuracy{}
	}
	return EstimatorAccuracy{j.wrongAllows, j.wrongDenies, float64(j.wrongAllows+j.wrongDenies) / float64(n), j.diff / float64(n)}
}
