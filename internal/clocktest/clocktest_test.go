package clocktest

import (
	"testing"
	"time"
)

// TestAwayFromEdge: within the margin of a window's end, AwayFromEdge returns once the
// next window has begun (100ms into it); outside the margin, at once.
func TestAwayFromEdge(t *testing.T) {
	const period = 200 * time.Millisecond
	for range 5 {
		start := time.Now()
		AwayFromEdge(t, period, period) // every instant is within a whole period of the end
		now := time.Now()
		if now.UnixMicro()/period.Microseconds() == start.UnixMicro()/period.Microseconds() {
			t.Fatalf("returned in the window it was called in (%v, %v)", start, now)
		}
		if d := now.Sub(start); d < 100*time.Millisecond {
			t.Fatalf("returned after %v, want the rest of the window and 100ms more", d)
		}
	}
	start := time.Now()
	AwayFromEdge(t, time.Hour, 0)
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("waited %v with no margin", d)
	}
}

// TestRunning: a Running clock starts at its instant and never goes back.
func TestRunning(t *testing.T) {
	now := Running(MidHour)
	first := now()
	if first.Before(MidHour) {
		t.Fatalf("first reading %v, before MidHour (%v)", first, MidHour)
	}
	for range 1000 {
		if next := now(); next.Before(first) {
			t.Fatalf("went back from %v to %v", first, next)
		}
	}
}
