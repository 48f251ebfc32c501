// Package poll is how tests wait for a state that another goroutine or process reaches on
// its own (a connection it closed, a file it reloaded, a metric it updated): the event is
// a condition turning true, polled every few milliseconds; the time limit only turns its
// absence into a failure rather than a hang, and is never what the test waits for.
package poll

import "time"

// Interval is the time between two evaluations of a condition.
const Interval = 5 * time.Millisecond

// TB is the part of testing.TB that Until uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Until returns as soon as cond holds. If it does not hold within the given time, Until
// fails tb with a message naming what was awaited.
func Until(tb TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	UntilDescribed(tb, within, what, cond, nil)
}

// UntilDescribed is Until, and its failure adds describe's account of the state, if
// describe is not nil.
func UntilDescribed(tb TB, within time.Duration, what string, cond func() bool, describe func() string) {
	tb.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(Interval) {
		if time.Now().After(deadline) {
			state := ""
			if describe != nil {
				state = ": " + describe()
			}
			tb.Fatalf("%s: not within %v%s", what, within, state)
			return
		}
	}
}
