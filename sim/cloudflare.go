package sim

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// Cloudflare's published figures for its sliding window counter, from "How we built rate
// limiting capable of scaling to millions of domains" (Julien Desgats, Cloudflare blog,
// 7 June 2017), quoted: "an analysis on 400 million requests from 270,000 distinct sources
// shown: 0.003% of requests have been wrongly allowed or rate limited; An average
// difference of 6% between real rate and the approximate rate; 3 sources have been allowed
// despite generating traffic slightly above the threshold (false negatives), the actual
// rate was less than 15% above the threshold rate; None of the mitigated sources was below
// the threshold (false positives)".
const (
	CloudflareRequests        = 400_000_000
	CloudflareSources         = 270_000
	CloudflareWrongRate       = 0.00003
	CloudflareMeanDifference  = 0.06
	CloudflareMissedSources   = 3
	CloudflareMissedOvershoot = 0.15
	CloudflareFalseSources    = 0
)

// CloudflareLimit is the threshold of the post's worked example: "Let's say I set a limit
// of 50 requests per minute on an API endpoint." The thresholds of the rules behind the
// published figures are not given.
var CloudflareLimit = sluice.Limit{Rate: 50, Period: time.Minute}

// Assumptions where the post is silent (see CloudflarePopulation): the span of the 400
// million requests, and how many of the 270,000 sources sent above the threshold.
const (
	cloudflareSpan         = 24 * time.Hour
	cloudflareSourcesAbove = 10
)

// CloudflareWorkload describes the Cloudflare-like population in a clause.
const CloudflareWorkload = "each source sends Poisson traffic at its own mean rate, the rates Pareto-distributed: " +
	"nearly all sources far below the threshold, a handful above it"

// CloudflarePopulation returns the population behind the comparison with Cloudflare's
// published accuracy: sources under CloudflareLimit over d, with near extra sources in the
// near-threshold band. What the post publishes fixes the population where it can; the
// rest is assumed, each assumption with what it rests on:
//
//   - The threshold is the post's worked example, 50 requests per minute ("Let's say I set
//     a limit of 50 requests per minute on an API endpoint"); the real ones are not given.
//   - The sample spans a day. Its span is not given; the limiter then handled "several
//     billion requests per day". Over a day, 400 million requests from 270,000 sources are
//     1,481 per source, 1.03 a minute.
//   - 10 of the 270,000 sources send above the threshold on average: a handful. The post
//     implies at least five ("3 sources have been allowed despite generating traffic
//     slightly above the threshold", and "None of the mitigated sources" speaks of more
//     than one mitigated).
//   - The mean rates are Pareto-distributed (most sources slow, a few fast), the usual
//     heavy-tailed model of per-client rates, fitted to that mean and that share above the
//     threshold. Of the two laws that fit, this is the lighter-tailed one (Alpha ≈ 2.29,
//     MinRate ≈ 0.58 per minute); in the other (Alpha ≈ 1.002) the median source would send
//     one request every four hours and a few very fast ones would carry the mean.
//   - Each source sends Poisson traffic at its mean rate: the estimator "assumes a constant
//     rate of requests during the previous sampling period".
//   - How the analysis judged a request is not said. Every request is counted (no
//     mitigation feeding back) and judged as [Estimate] says. A source is let through
//     above the threshold when its exact count exceeded it and its estimate never did, and
//     limited below it when the reverse.
func CloudflarePopulation(sources int, d time.Duration, near int) Population {
	periods := float64(cloudflareSpan) / float64(CloudflareLimit.Period)
	mean := float64(CloudflareRequests) / CloudflareSources / periods
	alpha, minRate := paretoFit(mean, float64(CloudflareLimit.Rate), cloudflareSourcesAbove/float64(CloudflareSources))
	return Population{
		Sources: sources, Limit: CloudflareLimit, Duration: d,
		MinRate: minRate, Alpha: alpha, NearSources: near,
	}
}

// paretoFit returns the lighter-tailed Pareto law (alpha, xm) with the given mean and a
// share above of its mass above threshold: xm = mean·(alpha−1)/alpha and
// (xm/threshold)^alpha = above. The share above is largest at the alpha where
// ln(xm/threshold) + 1/(alpha−1) = 0, falling on either side; the lighter-tailed solution
// is the one beyond it. above must be small enough for a solution to exist.
func paretoFit(mean, threshold, above float64) (alpha, xm float64) {
	xmOf := func(a float64) float64 { return mean * (a - 1) / a }
	slope := func(a float64) float64 { return math.Log(xmOf(a)/threshold) + 1/(a-1) } // decreasing
	excess := func(a float64) float64 { return a*math.Log(xmOf(a)/threshold) - math.Log(above) }
	peak := bisect(slope, 1+1e-12, 1e3)
	alpha = bisect(excess, peak, 1e3)
	return alpha, xmOf(alpha)
}

// bisect finds the root of f, decreasing on [lo, hi].
func bisect(f func(float64) float64, lo, hi float64) float64 {
	for range 200 {
		m := (lo + hi) / 2
		if f(m) > 0 {
			lo = m
		} else {
			hi = m
		}
	}
	return (lo + hi) / 2
}
