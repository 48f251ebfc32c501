// Package clocktest is the clocks of tests: the stores, the deny cache, the breaker and the
// HTTP layers take a func() time.Time, and tests give them a settable Clock's Now, or a
// Running clock where time must pass for real.
package clocktest

import (
	"sync/atomic"
	"time"
)

// Clock is a settable clock with the stores' resolution, whole microseconds since the
// Unix epoch. It is safe for concurrent use. Now returns times in time.Local, as
// time.Now does, so a test that changes time.Local sees it.
type Clock struct{ us atomic.Int64 }

// New returns a Clock set to t (truncated to the microsecond).
func New(t time.Time) *Clock {
	c := &Clock{}
	c.us.Store(t.UnixMicro())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Advance moves the clock by d (truncated to the microsecond; negative moves it back).
func (c *Clock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// Set sets the clock to t (truncated to the microsecond).
func (c *Clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// Micros returns the clock's time in microseconds since the Unix epoch.
func (c *Clock) Micros() int64 { return c.us.Load() }

// SetMicros sets the clock to us microseconds since the Unix epoch.
func (c *Clock) SetMicros(us int64) { c.us.Store(us) }

// Running returns a clock that reads from when Running is called, then runs at the
// rate of the monotonic clock. A test of fixed windows that needs time to pass for real
// starts it mid-window (MidHour), so that no window ends during the test.
func Running(from time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return from.Add(time.Since(start)) }
}

// MidHour is an instant in the middle of an hour, for Running.
var MidHour = time.Date(2025, time.June, 1, 12, 30, 0, 0, time.UTC)

// TB is the part of testing.TB that AwayFromEdge uses.
type TB interface {
	Helper()
	Logf(format string, args ...any)
}

// AwayFromEdge waits, when the wall clock is within margin of the end of a window of
// length period (aligned to the Unix epoch, as FixedWindow's are), until the next window
// has begun, so that a test counting a window's decisions on a wall clock it cannot
// replace (Redis's TIME, another program's) is not reset. Other tests inject a Clock.
func AwayFromEdge(tb TB, period, margin time.Duration) {
	tb.Helper()
	now := time.Now().UnixMicro()
	p := period.Microseconds()
	if left := time.Duration(p-now%p) * time.Microsecond; left < margin {
		tb.Logf("waiting %v for a %v window to end: the test counts decisions in one", left, period)
		time.Sleep(left + 100*time.Millisecond)
	}
}
