package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestParetoFit: the Cloudflare-like population's rate law has the documented mean (1,481
// requests per source over a day) and share above the threshold (10 in 270,000), and is
// the lighter-tailed of the two laws that fit.
func TestParetoFit(t *testing.T) {
	p := CloudflarePopulation(CloudflareSources, 10*time.Minute, 0)
	mean := p.MinRate * p.Alpha / (p.Alpha - 1) * float64(24*time.Hour/p.Limit.Period) // per source per day
	if want := float64(CloudflareRequests) / CloudflareSources; math.Abs(mean-want) > 1e-6*want {
		t.Errorf("mean %v requests per source per day, want %v", mean, want)
	}
	above := math.Pow(p.MinRate/float64(p.Limit.Rate), p.Alpha) * CloudflareSources
	if math.Abs(above-cloudflareSourcesAbove) > 1e-6 {
		t.Errorf("%v sources expected above the threshold, want %v", above, cloudflareSourcesAbove)
	}
	if p.Alpha < 2 || p.Alpha > 3 {
		t.Errorf("alpha %v, want the lighter-tailed fit (about 2.3)", p.Alpha)
	}
	if p.Limit != CloudflareLimit || p.Limit.Rate != 50 || p.Limit.Period != time.Minute {
		t.Errorf("threshold %v, want the post's 50 per minute", p.Limit)
	}
}

// TestPopulationStreamsAsAPattern: measuring a population source by source judges every
// request exactly as Estimate judges the same traffic run as one many-key pattern.
func TestPopulationStreamsAsAPattern(t *testing.T) {
	p := CloudflarePopulation(3000, 5*time.Minute, 0)
	p.MinRate *= 10 // faster sources, so that some reach the threshold
	const seed, name = 5, "streamed"
	got, err := p.measure(context.Background(), name, seed, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	pat := Pattern{
		Name: name, Limit: p.Limit, Duration: p.Duration, Keys: p.Sources,
		Arrivals: func(*rand.Rand) []Arrival {
			var out []Arrival
			pcg := rand.NewPCG(0, 0)
			r := rand.New(pcg)
			for i := range p.Sources {
				seedSource(pcg, seed, name, i, false)
				gap := float64(p.Limit.Period.Microseconds()) / p.rate(r)
				poissonAt(r, float64(p.Duration.Microseconds()), gap, func(at int64) {
					out = append(out, Arrival{At: at, Key: int32(i)})
				})
			}
			sortArrivals(out)
			return out
		},
	}
	want := estimate(pat, pat.Arrivals(nil))
	if got.Requests != want.Requests || got.Discrete.WrongAllows+got.Discrete.WrongDenies == 0 {
		t.Fatalf("population: %d requests, %+v; pattern: %d requests", got.Requests, got.Discrete, want.Requests)
	}
	for _, c := range []struct {
		name      string
		got, want EstimatorAccuracy
	}{{"discrete", got.Discrete.EstimatorAccuracy, want.Discrete}, {"continuous", got.Continuous.EstimatorAccuracy, want.Continuous}} {
		if c.got.WrongAllows != c.want.WrongAllows || c.got.WrongDenies != c.want.WrongDenies ||
			math.Abs(c.got.MeanDifference-c.want.MeanDifference) > 1e-12 {
			t.Errorf("%s: population %+v, pattern %+v", c.name, c.got, c.want)
		}
	}
}

// TestSensitivity: the wrong-decision rate rises strictly with the share of requests from
// near-threshold sources, and the average difference falls with it (the near sources' fuller
// windows are estimated more closely); the last row is the near-threshold stratum alone;
// and mixing at the implied shares gives Cloudflare's figures back.
func TestSensitivity(t *testing.T) {
	r := smallReport(t)
	if len(r.Populations) != 1 || r.Populations[0].Pattern != "cloudflare" {
		t.Fatalf("populations %+v, want the cloudflare pattern's", r.Populations)
	}
	a := r.Populations[0]
	rows := a.Sensitivity
	if len(rows) < 5 {
		t.Fatalf("%d sensitivity rows", len(rows))
	}
	own := 0
	for i, row := range rows {
		if row.Population {
			own++
			if row.NearShare != a.NearShare {
				t.Errorf("row %d marked as the population's at %v, population at %v", i, row.NearShare, a.NearShare)
			}
		}
		if i == 0 {
			continue
		}
		prev := rows[i-1]
		if row.NearShare <= prev.NearShare {
			t.Errorf("row %d: share %v after %v", i, row.NearShare, prev.NearShare)
		}
		for _, f := range []struct {
			name     string
			cur, was Rates
		}{{"discrete", row.Discrete, prev.Discrete}, {"continuous", row.Continuous, prev.Continuous}} {
			if f.cur.WrongRate <= f.was.WrongRate {
				t.Errorf("%s: wrong rate %v at %v%% near-threshold, not above %v at %v%%", f.name, f.cur.WrongRate, 100*row.NearShare, f.was.WrongRate, 100*prev.NearShare)
			}
			if f.cur.MeanDifference >= f.was.MeanDifference {
				t.Errorf("%s: average difference %v at %v%% near-threshold, not below %v at %v%%", f.name, f.cur.MeanDifference, 100*row.NearShare, f.was.MeanDifference, 100*prev.NearShare)
			}
		}
	}
	if own != 1 {
		t.Errorf("%d rows marked as the population's, want 1", own)
	}
	last := rows[len(rows)-1]
	if last.NearShare != 1 || last.Discrete.WrongRate != a.Near.Discrete.WrongRate || last.Discrete.MeanDifference != a.Near.Discrete.MeanDifference {
		t.Errorf("last row %+v, want the near-threshold stratum %+v", last, a.Near.Discrete)
	}
	mix := func(s float64, near, rest float64) float64 { return s*near + (1-s)*rest }
	if s := a.ImpliedNearShare; s <= 0 || math.Abs(mix(s, a.Near.Discrete.WrongRate, a.Rest.Discrete.WrongRate)-CloudflareWrongRate) > 1e-12 {
		t.Errorf("implied near-threshold share %v does not give %v", s, CloudflareWrongRate)
	}
	if s := a.DifferenceNearShare; s <= 0 || math.Abs(mix(s, a.Near.Discrete.MeanDifference, a.Rest.Discrete.MeanDifference)-CloudflareMeanDifference) > 1e-12 {
		t.Errorf("near-threshold share %v does not give an average difference of %v", s, CloudflareMeanDifference)
	}
}

// TestCloudflarePopulation checks what the report says of the Cloudflare-like population
// (at a tenth of its size): the estimator errs only near the threshold, a few percent of
// the time there, so that on this traffic, nearly all far below the threshold, it errs on
// a small fraction of a percent; it never limits a source that stayed under the threshold.
func TestCloudflarePopulation(t *testing.T) {
	a := smallReport(t).Populations[0]
	if a.Sources != CloudflareSources/10 || a.Near.Sources != 200 || a.Duration != 10*time.Minute {
		t.Fatalf("population of %d sources (%d near) over %v, want 27,000 (200) over 10 min", a.Sources, a.Near.Sources, a.Duration)
	}
	if w := a.Near.Discrete.WrongRate; w < 0.005 || w > 0.1 {
		t.Errorf("near-threshold wrong rate %v, want a few percent", w)
	}
	if w := a.Rest.Discrete.WrongRate; w > a.Near.Discrete.WrongRate/100 {
		t.Errorf("wrong rate away from the threshold %v, want far below the near-threshold %v", w, a.Near.Discrete.WrongRate)
	}
	if s := a.NearShare; s <= 0 || s > 0.02 {
		t.Errorf("near-threshold share %v, want a small fraction", s)
	}
	if w := a.Discrete.WrongRate; w > 0.001 {
		t.Errorf("wrong rate %v on mostly well-behaved traffic, want below 0.1%%", w)
	}
	if d := a.Near.Discrete.MeanDifference; d < 0.01 || d > 0.1 {
		t.Errorf("near-threshold average difference %v, want a few percent", d)
	}
	for _, e := range []PopulationEstimator{a.Discrete, a.Continuous} {
		if e.FalseFlagged != 0 {
			t.Errorf("%d sources limited without ever exceeding the threshold", e.FalseFlagged)
		}
		if e.Missed > 0 && (e.MissedPeak <= 1 || e.MissedPeak > 1+CloudflareMissedOvershoot) {
			t.Errorf("%d sources missed, peaking at %v× the threshold", e.Missed, e.MissedPeak)
		}
	}
}

// TestPopulationSameSeed: the same seed gives the same figures whatever the parallelism,
// another seed other figures.
func TestPopulationSameSeed(t *testing.T) {
	p := CloudflarePopulation(5000, 3*time.Minute, 100)
	measure := func(seed uint64, parallel int) PopulationAccuracy {
		a, err := p.measure(context.Background(), "cloudflare", seed, parallel, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a, b := measure(9, 1), measure(9, 3)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("seed 9 gave two results:\n%+v\n%+v", a, b)
	}
	if c := measure(10, 2); reflect.DeepEqual(a, c) {
		t.Error("seeds 9 and 10 gave the same figures")
	}
}

func TestBadPopulation(t *testing.T) {
	good := CloudflarePopulation(10, time.Minute, 1)
	for name, p := range map[string]func(Population) Population{
		"no sources":   func(p Population) Population { p.Sources = 0; return p },
		"no duration":  func(p Population) Population { p.Duration = 0; return p },
		"alpha 1":      func(p Population) Population { p.Alpha = 1; return p },
		"min rate NaN": func(p Population) Population { p.MinRate = math.NaN(); return p },
		"no limit":     func(p Population) Population { p.Limit.Rate = 0; return p },
	} {
		t.Run(name, func(t *testing.T) {
			bad := p(good)
			pat := fixed("pop", CloudflareLimit, time.Minute, 0)
			pat.Population = &bad
			if _, err := Run(context.Background(), Config{Patterns: []Pattern{pat}}); err == nil {
				t.Error("Run accepted it")
			}
		})
	}
}
