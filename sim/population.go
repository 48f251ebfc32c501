package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

// Population is a crowd of independent sources under one threshold, each sending Poisson
// traffic at its own mean rate, the rates Pareto-distributed: most sources slow, a few
// fast (see CloudflarePopulation). It is measured without a store, one source at a time:
// the sliding window counter judges each source on its own traffic alone.
type Population struct {
	// Sources is the number of sources.
	Sources int
	// Limit is the threshold: Rate requests per Period, for each source.
	Limit sluice.Limit
	// Duration is the span of the traffic, from Epoch.
	Duration time.Duration
	// MinRate (requests per Period, > 0) and Alpha (> 1) are the Pareto distribution of
	// the sources' mean rates: a share (MinRate/x)^Alpha of sources send more than x.
	MinRate, Alpha float64
	// NearSources is the number of extra sources drawn from the same distribution
	// restricted to the near-threshold band [Rate/2, 3·Rate/2] (PopulationAccuracy.Near).
	NearSources int
}

// The band of mean rates, as multiples of the threshold, whose sources are near it.
const nearLow, nearHigh = 0.5, 1.5

// PopulationAccuracy is how the sliding window counter fared as a rate estimator on a
// Population, per request as Estimate measures it on a pattern, and per source.
//
// Only requests near the threshold can be misjudged. Since each source is judged on its
// own traffic, a crowd's figures are the request-weighted mean of its sources':
// Sensitivity mixes Near and Rest to show them for any share of near-threshold traffic.
type PopulationAccuracy struct {
	Pattern  string        `json:"pattern"`
	Sources  int           `json:"sources"`
	Requests int64         `json:"requests"`
	Duration time.Duration `json:"duration"`
	Limit    string        `json:"limit"`
	MinRate  float64       `json:"min_rate"`
	Alpha    float64       `json:"alpha"`
	// SourcesAbove is the number of sources whose mean rate is above the threshold.
	SourcesAbove int `json:"sources_above"`
	// Discrete and Continuous are the two formulas, as in Estimate.
	Discrete   PopulationEstimator `json:"discrete"`
	Continuous PopulationEstimator `json:"continuous"`
	// NearShare is the share of requests sent by sources whose mean rate is within ±50%
	// of the threshold.
	NearShare float64 `json:"near_share"`
	// Near holds the figures on the NearSources extra near-threshold sources alone, Rest
	// on the population's sources outside the band.
	Near Stratum `json:"near"`
	Rest Stratum `json:"rest"`
	// Sensitivity is the figures of crowds mixing Near and Rest traffic, by increasing
	// NearShare: 0.01%, 0.1%, 1%, 10%, this population's own share, and 100%.
	Sensitivity []SensitivityRow `json:"sensitivity"`
	// ImpliedNearShare and DifferenceNearShare are the NearShare at which such a crowd's
	// wrong rate (sluice's formula) is CloudflareWrongRate, and its average difference
	// CloudflareMeanDifference; 0 when no share gives it.
	ImpliedNearShare    float64 `json:"implied_near_share"`
	DifferenceNearShare float64 `json:"difference_near_share"`
}

// PopulationEstimator is one estimator's figures over a whole population.
type PopulationEstimator struct {
	EstimatorAccuracy
	// Exceeded sources had an exact count above the threshold at one request at least;
	// Missed of them never had an estimate above it (let through), the highest exact
	// count among them MissedPeak times the threshold.
	Exceeded   int     `json:"exceeded"`
	Missed     int     `json:"missed"`
	MissedPeak float64 `json:"missed_peak"`
	// Flagged sources had an estimate above the threshold at one request at least (a
	// limiter would have limited them); FalseFlagged of them never had an exact count
	// above it.
	Flagged      int `json:"flagged"`
	FalseFlagged int `json:"false_flagged"`
}

// Stratum is the estimators' figures on part of a population's sources.
type Stratum struct {
	Sources    int               `json:"sources"`
	Requests   int64             `json:"requests"`
	Discrete   EstimatorAccuracy `json:"discrete"`
	Continuous EstimatorAccuracy `json:"continuous"`
}

// SensitivityRow is the estimators' figures on a crowd whose share NearShare of requests
// comes from sources like Near's and the rest from sources like Rest's.
type SensitivityRow struct {
	NearShare float64 `json:"near_share"`
	// Population marks the row at the population's own NearShare.
	Population bool  `json:"population,omitempty"`
	Discrete   Rates `json:"discrete"`
	Continuous Rates `json:"continuous"`
}

// Rates is a wrong-decision rate and an average difference, as in EstimatorAccuracy.
type Rates struct {
	WrongRate      float64 `json:"wrong_rate"`
	MeanDifference float64 `json:"mean_difference"`
}

// sensitivityShares are the near-threshold shares every Sensitivity table shows.
var sensitivityShares = []float64{0.0001, 0.001, 0.01, 0.1, 1}

// check reports what makes the population unusable.
func (p Population) check() error {
	switch {
	case p.Sources < 1 || p.NearSources < 0:
		return fmt.Errorf("population of %d sources (%d near)", p.Sources, p.NearSources)
	case p.Duration <= 0:
		return fmt.Errorf("population over %v", p.Duration)
	case !(p.MinRate > 0) || !(p.Alpha > 1) || math.IsInf(p.MinRate, 0) || math.IsInf(p.Alpha, 0):
		return fmt.Errorf("population rates Pareto(min %v, alpha %v): want min > 0 and alpha > 1", p.MinRate, p.Alpha)
	}
	return p.Limit.Validate()
}

// rate draws a mean rate (requests per Period) from the Pareto distribution.
func (p Population) rate(r *rand.Rand) float64 {
	return p.MinRate * math.Pow(1-r.Float64(), -1/p.Alpha) // 1-u is in (0, 1]
}

// nearRate draws a mean rate from the distribution restricted to the near band.
func (p Population) nearRate(r *rand.Rand) float64 {
	R := float64(p.Limit.Rate)
	lo, hi := max(nearLow*R, p.MinRate), max(nearHigh*R, p.MinRate)
	slo, shi := math.Pow(p.MinRate/lo, p.Alpha), math.Pow(p.MinRate/hi, p.Alpha) // survival at each end
	s := slo - r.Float64()*(slo-shi)
	return p.MinRate * math.Pow(s, -1/p.Alpha)
}

func (p Population) near(rate float64) bool {
	R := float64(p.Limit.Rate)
	return rate >= nearLow*R && rate <= nearHigh*R
}

// sample returns the arrivals of keys sources drawn from the population, over d: key 0 is
// the fastest, the others by decreasing rate.
func (p Population) sample(r *rand.Rand, keys int, d time.Duration) []Arrival {
	rates := make([]float64, keys)
	for i := range rates {
		rates[i] = p.rate(r)
	}
	slices.SortFunc(rates, func(a, b float64) int { return -cmp.Compare(a, b) })
	var out []Arrival
	for k, rate := range rates {
		out = append(out, poisson(r, d, rate/p.Limit.Period.Seconds(), int32(k))...)
	}
	sortArrivals(out)
	return out
}

// tally accumulates the verdicts on a set of sources, per estimator: sluice's (0) and
// the formula as published (1).
type tally struct {
	sources  int
	requests int64
	above    int
	est      [2]judged
}

func (t *tally) merge(o tally) {
	t.sources += o.sources
	t.requests += o.requests
	t.above += o.above
	for i := range t.est {
		t.est[i].merge(o.est[i])
	}
}

func (t tally) stratum() Stratum {
	return Stratum{Sources: t.sources, Requests: t.requests, Discrete: t.est[0].accuracy(t.requests), Continuous: t.est[1].accuracy(t.requests)}
}

func (t tally) estimator(i int, R int64) PopulationEstimator {
	j := t.est[i]
	return PopulationEstimator{
		EstimatorAccuracy: j.accuracy(t.requests),
		Exceeded:          j.exceeded, Missed: j.missed, MissedPeak: float64(j.missedPeak) / float64(R),
		Flagged: j.flagged, FalseFlagged: j.falseFlagged,
	}
}

// judge streams one source's Poisson traffic at rate (per Period) through k, which it
// resets first, and adds the verdicts to t.
func (p Population) judge(k *keyState, r *rand.Rand, rate float64, t *tally) {
	*k = keyState{win: k.win[:0]}
	P, R := p.Limit.Period.Microseconds(), p.Limit.Rate
	start := Epoch.UnixMicro()
	var exceeded bool
	var flagged [2]bool
	var peak int64
	poissonAt(r, float64(p.Duration.Microseconds()), float64(P)/rate, func(at int64) {
		exact, est := k.count(start+at, P)
		t.requests++
		for i, e := range est {
			t.est[i].add(exact, e, R)
			flagged[i] = flagged[i] || e > float64(R)
		}
		exceeded = exceeded || exact > R
		peak = max(peak, exact)
	})
	t.sources++
	if rate > float64(R) {
		t.above++
	}
	for i := range t.est {
		t.est[i].addSource(exceeded, flagged[i], peak)
	}
}

// seedSource seeds pcg for source i of the population (near: of the extra near-threshold
// sources) of the named pattern: every source has its own generator.
func seedSource(pcg *rand.PCG, seed uint64, name string, i int, near bool) {
	stream := nameHash(name+"/population") ^ uint64(i)*0x9e3779b97f4a7c15
	if near {
		stream = ^stream
	}
	pcg.Seed(seed, stream)
}

// populationChunk is the number of sources measured as one task. Chunks are summed in
// order, so the figures do not depend on how many run at once.
const populationChunk = 1024

// measure computes the PopulationAccuracy of p for the given pattern name and seed. Each
// source's rate and traffic come from its own generator, seeded from the seed, the name
// and the source's index.
func (p Population) measure(ctx context.Context, name string, seed uint64, parallel int, progress func(int64)) (PopulationAccuracy, error) {
	if err := p.check(); err != nil {
		return PopulationAccuracy{}, fmt.Errorf("sim: pattern %s: %w", name, err)
	}
	// Chunks [0, crowd) are the population, split into near and rest; the following ones
	// the extra near-threshold sources.
	crowd := (p.Sources + populationChunk - 1) / populationChunk
	type result struct{ near, rest, extra tally }
	results := make([]result, crowd+(p.NearSources+populationChunk-1)/populationChunk)
	err := forEach(ctx, len(results), parallel, func(_ context.Context, c int) error {
		pcg := rand.NewPCG(0, 0)
		r := rand.New(pcg)
		var k keyState
		res := &results[c]
		extra, n := c >= crowd, p.Sources
		if extra {
			c, n = c-crowd, p.NearSources
		}
		for i := c * populationChunk; i < min((c+1)*populationChunk, n); i++ {
			seedSource(pcg, seed, name, i, extra)
			if extra {
				p.judge(&k, r, p.nearRate(r), &res.extra)
				continue
			}
			rate, t := p.rate(r), &res.rest
			if p.near(rate) {
				t = &res.near
			}
			p.judge(&k, r, rate, t)
		}
		if progress != nil {
			progress(res.near.requests + res.rest.requests + res.extra.requests)
		}
		return nil
	})
	if err != nil {
		return PopulationAccuracy{}, err
	}
	var near, rest, extra tally
	for _, res := range results {
		near.merge(res.near)
		rest.merge(res.rest)
		extra.merge(res.extra)
	}
	all := near
	all.merge(rest)

	out := PopulationAccuracy{
		Pattern: name, Sources: p.Sources, Requests: all.requests, Duration: p.Duration,
		Limit:   fmt.Sprintf("%d %s", p.Limit.Rate, per(p.Limit.Period)),
		MinRate: p.MinRate, Alpha: p.Alpha, SourcesAbove: all.above,
		Discrete:   all.estimator(0, p.Limit.Rate),
		Continuous: all.estimator(1, p.Limit.Rate),
		Near:       extra.stratum(),
		Rest:       rest.stratum(),
		NearShare:  float64(near.requests) / float64(max(all.requests, 1)),
	}
	mix := func(s float64, near, rest EstimatorAccuracy) Rates {
		return Rates{
			WrongRate:      s*near.WrongRate + (1-s)*rest.WrongRate,
			MeanDifference: s*near.MeanDifference + (1-s)*rest.MeanDifference,
		}
	}
	shares := append([]float64{}, sensitivityShares...)
	if !slices.Contains(shares, out.NearShare) {
		shares = append(shares, out.NearShare)
	}
	slices.Sort(shares)
	for _, s := range shares {
		out.Sensitivity = append(out.Sensitivity, SensitivityRow{
			NearShare: s, Population: s == out.NearShare,
			Discrete:   mix(s, out.Near.Discrete, out.Rest.Discrete),
			Continuous: mix(s, out.Near.Continuous, out.Rest.Continuous),
		})
	}
	out.ImpliedNearShare = mixShare(CloudflareWrongRate, out.Near.Discrete.WrongRate, out.Rest.Discrete.WrongRate)
	out.DifferenceNearShare = mixShare(CloudflareMeanDifference, out.Near.Discrete.MeanDifference, out.Rest.Discrete.MeanDifference)
	return out, nil
}

// mixShare is the share s in [0, 1] with s·near + (1−s)·rest = target, or 0 if there is
// none (or near = rest).
func mixShare(target, near, rest float64) float64 {
	if near == rest {
		return 0
	}
	s := (target - rest) / (near - rest)
	if s < 0 || s > 1 {
		return 0
	}
	return s
}

// expectedRequests is about how many requests measure will judge, for progress.
func (p Population) expectedRequests() int64 {
	mean := p.MinRate * p.Alpha / (p.Alpha - 1)
	periods := float64(p.Duration) / float64(p.Limit.Period)
	return int64(float64(p.Sources)*mean*periods + float64(p.NearSources)*float64(p.Limit.Rate)*periods*0.8)
}
