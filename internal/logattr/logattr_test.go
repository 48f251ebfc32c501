package logattr

import (
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		got  int64
		want int64
	}{
		{Micros("x_us", 571404*time.Nanosecond).Value.Int64(), 571},
		{Millis("x_ms", 1500*time.Microsecond).Value.Int64(), 2},
		{Millis("x_ms", time.Minute).Value.Int64(), 60000},
		{Millis("x_ms", 0).Value.Int64(), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("got %d, want %d", tc.got, tc.want)
		}
	}
}
