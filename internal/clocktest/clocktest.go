// Package clocktest is a settable clock for tests: the stores, the deny cache and the HTTP
// layers take a func() time.Time, and tests give them Clock.Now.
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
