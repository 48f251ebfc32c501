package main

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		q, w float64
	}{
		{nil, 0.5, 0},
		{[]float64{3}, 0.99, 3},
		{[]float64{4, 1, 3, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 0.99, 4},
		{[]float64{5, 1, 2, 3, 4, 6, 7, 8, 9, 10}, 0.9, 9},
	} {
		if got := quantile(c.v, c.q); got != c.w {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.v, c.q, got, c.w)
		}
	}
}

// TestSummarise checks that requests count in the phase they were due in, and goodput in
// the phase they were answered in.
func TestSummarise(t *testing.T) {
	phases := []phase{{Name: "a", Duration: 2 * time.Second}, {Name: "b", Duration: 2 * time.Second, Slow: true}}
	ms := time.Millisecond
	r := runResult{records: []record{
		{due: 100 * ms, latency: 50 * ms, class: critical, outcome: ok},        // a, answered in a
		{due: 1900 * ms, latency: 200 * ms, class: critical, outcome: ok},      // a, answered in b
		{due: 1950 * ms, latency: 10 * ms, class: sheddable, outcome: shedded}, // a
		{due: 2000 * ms, latency: 30 * ms, class: sheddable, outcome: ok},      // b: a phase begins at its bound
		{due: 2500 * ms, latency: 2 * time.Second, class: critical, outcome: timedOut},
		{due: 3000 * ms, class: sheddable, outcome: overflowed},
	}}
	r.summarise(phases, 10)
	a, b := r.Phases[0], r.Phases[1]
	if a.Critical.Offered != 2 || a.Critical.OK != 2 || a.Sheddable.Offered != 1 || a.Sheddable.Shed != 1 {
		t.Errorf("phase a: critical %+v, sheddable %+v", a.Critical, a.Sheddable)
	}
	if b.Critical.Offered != 1 || b.Critical.TimedOut != 1 || b.Sheddable.Offered != 2 || b.Sheddable.OK != 1 || b.Sheddable.Overflow != 1 {
		t.Errorf("phase b: critical %+v, sheddable %+v", b.Critical, b.Sheddable)
	}
	if a.Goodput != 0.5 || b.Goodput != 1 {
		t.Errorf("goodput a %v, b %v; want 0.5 and 1 (by when answered)", a.Goodput, b.Goodput)
	}
	if b.Share != 0.2 { // 1/s of a capacity halved to 5/s
		t.Errorf("phase b's share of its capacity = %v, want 0.2", b.Share)
	}
	if a.Critical.P99 != 200 || a.Critical.P50 != 50 {
		t.Errorf("phase a critical p50/p99 = %v/%v ms, want 50/200", a.Critical.P50, a.Critical.P99)
	}
	if a.Critical.Success != 1 || b.Sheddable.Success != 0.5 {
		t.Errorf("success: a critical %v, b sheddable %v", a.Critical.Success, b.Sheddable.Success)
	}
}

func TestSettle(t *testing.T) {
	// The upstream halves at 10 s; the run ends at 30 s.
	series := func(f func(t float64) int) []sampleAt {
		var s []sampleAt
		for i := range 300 {
			at := float64(i) / 10
			s = append(s, sampleAt{T: at, Limit: f(at)})
		}
		return s
	}
	for _, c := range []struct {
		name    string
		limit   func(t float64) int
		settled bool
		after   float64
		final   float64
	}{
		{"steps down and holds", func(t float64) int {
			if t < 13 {
				return 40
			}
			return 20
		}, true, 3, 20},
		{"takes too long", func(t float64) int {
			if t < 22 {
				return 40
			}
			return 20
		}, false, 12, 20},
		{"swings ±30%", func(t float64) int {
			if int(t)%2 == 0 {
				return 13
			}
			return 10
		}, false, 19, 10},
	} {
		st := settle(series(c.limit), 0, 10, 30)
		if st == nil {
			t.Fatalf("%s: nil", c.name)
		}
		if st.Settled != c.settled || math.Abs(st.After-c.after) > 0.15 || st.Final != c.final {
			t.Errorf("%s: %+v; want settled %v after %v s at %v", c.name, st, c.settled, c.after, c.final)
		}
	}
}
