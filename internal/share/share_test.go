package share

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

func TestFromFraction(t *testing.T) {
	for f, want := range map[float64]int64{0.29: 290000, 0.57: 570000, 0.125: 125000, 1: Whole, 1.0 / 3: 333334,
		2.0 / 3: 666667, 1.0 / 7: 142858, 0.0000004: 0, 0.0000005: 1, 0.000001: 1, 0: 0, -1: 0, 1.5: 0} {
		if got := FromFraction(f); got != want {
			t.Errorf("FromFraction(%v) = %d, want %d", f, got, want)
		}
	}
}

// TestLimit: one rounding for every share of a limit; 29% of 100 is 29 (a float product
// gave 28.999… and so 28 in one of the copies this replaced).
func TestLimit(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		share float64
		want  sluice.Limit
	}{
		{sluice.PerSecond(100), 0.29, sluice.PerSecond(29)},
		{sluice.PerSecond(100), 0.57, sluice.PerSecond(57)},
		{sluice.PerSecond(100), 1, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 0, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 1.5, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 0.25, sluice.PerSecond(25)},
		{sluice.PerSecond(100), 1.0 / 3, sluice.PerSecond(33)},
		{sluice.PerMinute(9), 1.0 / 3, sluice.PerMinute(3)}, // 1/N of a multiple of N is exact
		{sluice.PerMinute(700), 1.0 / 7, sluice.PerMinute(100)},
		{sluice.PerSecond(2), 0.1, sluice.PerSecond(1)}, // never below 1
		{sluice.PerMinute(60).WithBurst(10), 0.5, sluice.PerMinute(30).WithBurst(5)},
		{sluice.PerMinute(60).WithBurst(1), 0.5, sluice.PerMinute(30).WithBurst(1)},
		{sluice.PerSecond(100).WithBurst(20), 0.25, sluice.PerSecond(25).WithBurst(5)},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour}, 0.1,
			sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Hour}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: store.MaxRate, Period: time.Hour}, 0.5,
			sluice.Limit{Algorithm: sluice.FixedWindow, Rate: store.MaxRate / 2, Period: time.Hour}},
	}
	for _, tt := range tests {
		got := Limit(tt.limit, FromFraction(tt.share))
		if got != tt.want {
			t.Errorf("Limit(%v, %v) = %v, want %v", tt.limit, tt.share, got, tt.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Limit(%v, %v) is invalid: %v", tt.limit, tt.share, err)
		}
	}
}

// TestOfSums: N shares of 1/N of v sum to at most v when N ≤ v and v·N < Whole, and to
// exactly v when N divides v.
func TestOfSums(t *testing.T) {
	for n := int64(1); n <= 50; n++ {
		ppm := FromFraction(1 / float64(n))
		for v := n; v*n < Whole; v += 7 {
			if sum := n * Of(v, ppm); sum > v || v%n == 0 && sum != v {
				t.Fatalf("%d shares of %d ppm of %d sum to %d", n, ppm, v, sum)
			}
		}
	}
}
