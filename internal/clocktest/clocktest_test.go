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
		// A lower bound only: load can make a sleep longer, never shorter.
		if d := now.Sub(start); d < 100*time.Millisecond {
			t.Fatalf("returned after %v, want the rest of the window and 100ms more", d)
		}
	}
	// Outside the margin it does not wait: a wait is logged before it sleeps.
	var tb logCounter
	AwayFromEdge(&tb, time.Hour, 0)
	if tb.logs != 0 {
		t.Fatalf("waited with no margin (%d log lines)", tb.logs)
	}
}

// logCounter is a TB that counts the lines AwayFromEdge logs.
type logCounter struct{ logs int }

func (*logCounter) Helper()               {}
func (c *logCounter) Logf(string, ...any) { c.logs++ }

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
