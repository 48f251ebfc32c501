// Package logattr writes durations into sluice's log records the one way they are all
// written: as integers with the unit in the key, latencies in microseconds ("_us") and
// waits and periods in milliseconds ("_ms", rounded up, so a wait is never understated),
// whatever the slog handler (JSON would print nanoseconds, text "1.5s").
package logattr

import (
	"log/slog"
	"time"
)

// Micros is d in whole microseconds, for a key ending in "_us" (latencies).
func Micros(key string, d time.Duration) slog.Attr {
	return slog.Int64(key, d.Microseconds())
}

// Millis is d in milliseconds rounded up, for a key ending in "_ms" (waits, periods).
func Millis(key string, d time.Duration) slog.Attr {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return slog.Int64(key, int64(ms))
}
