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

// Cloudflare's published figures for its sliding window counter: 400 million requests from
// 270,000 sources; 0.003% wrongly allowed or rate limited; 6% average difference between
// real and approximate rate.
const (
	CloudflareRequests       = 400_000_000
	CloudflareSources        = 270_000
	CloudflareWrongRate      = 0.00003
	CloudflareMeanDifference = 0.06
)

// estimate computes the Estimate of p's arrivals (for a closed-loop pattern, its demand).
func estimate(p Pattern, arrivals []Arrival) Estimate {
	P := p.Limit.Period.Microseconds()
	R := p.Limit.Rate
	keys := make([]keyState, p.Keys)
	start := Epoch.UnixMicro()
	var near int64
	var disc, cont struct {
		wa, wd int64
		diff   float64
	}
	for _, a := range arrivals {
		t := start + a.At
		k := &keys[a.Key]
		exact := k.inWindow(t, P) + 1
		k.win = append(k.win, t)
		k.estimate(t, P, false) // rolls the fixed windows
		k.cur++
		e := t - k.wStart
		d := algo.MulDiv(k.prev, P-e-1, P) + k.cur
		c := float64(k.prev)*float64(P-e)/float64(P) + float64(k.cur)

		disc.diff += math.Abs(float64(d-exact)) / float64(exact)
		cont.diff += math.Abs(c-float64(exact)) / float64(exact)
		over := exact > R
		if 2*exact > R {
			near++
		}
		switch {
		case d <= R && over:
			disc.wa++
		case d > R && !over:
			disc.wd++
		}
		switch {
		case c <= float64(R) && over:
			cont.wa++
		case c > float64(R) && !over:
			cont.wd++
		}
	}
	n := int64(len(arrivals))
	out := Estimate{Pattern: p.Name, Requests: n, Keys: p.Keys}
	if n > 0 {
		out.NearThreshold = float64(near) / float64(n)
		out.Discrete = EstimatorAccuracy{disc.wa, disc.wd, float64(disc.wa+disc.wd) / float64(n), disc.diff / float64(n)}
		out.Continuous = EstimatorAccuracy{cont.wa, cont.wd, float64(cont.wa+cont.wd) / float64(n), cont.diff / float64(n)}
	}
	return out
}
