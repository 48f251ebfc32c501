package sluice

import (
	"errors"
	"testing"
	"time"
)

func TestAlgorithmNamesRoundTrip(t *testing.T) {
	for _, a := range []Algorithm{GCRA, TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency} {
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("%v: round trip gave %v, %v", a, back, err)
		}
	}
	if a, err := ParseAlgorithm(" Sliding-Window "); err != nil || a != SlidingWindow {
		t.Fatalf("lenient parse: %v %v", a, err)
	}
	if _, err := ParseAlgorithm("leaky"); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("unknown name: %v", err)
	}
	if s := Algorithm(42).String(); s != "algorithm(42)" {
		t.Fatalf("unknown algorithm prints %q", s)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		l  Limit
		ok bool
	}{
		{PerSecond(1), true},
		{PerDay(1_000_000), true},
		{Limit{Rate: 1_000_000, Period: time.Second}, true},                         // T = 1µs
		{Limit{Rate: 1_000_001, Period: time.Second}, false},                        // T < 1µs
		{Limit{Algorithm: FixedWindow, Rate: 1_000_001, Period: time.Second}, true}, // windows have no T
		{Limit{Rate: 1, Period: 999 * time.Nanosecond}, false},
		{Limit{Rate: 1, Period: maxPeriod + time.Microsecond}, false},
		{Limit{Rate: -1, Period: time.Second}, false},
		{Limit{Rate: 1, Period: time.Second, Burst: -1}, false},
		{Limit{Rate: maxRate + 1, Period: maxPeriod}, false},
		{Limit{Algorithm: SlidingLog, Rate: maxLogRate + 1, Period: time.Hour}, false},
		{Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1 << 20}, false}, // refilling takes 2800 years
		{Limit{Algorithm: Algorithm(6), Rate: 1, Period: time.Second}, false},
	}
	for _, c := range cases {
		err := c.l.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%v: Validate() = %v, want ok=%v", c.l, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%v: error %v does not wrap ErrInvalidLimit", c.l, err)
		}
	}
}

func TestMaxCost(t *testing.T) {
	if got := PerSecond(10).MaxCost(); got != 10 {
		t.Fatalf("burst defaults to rate: %d", got)
	}
	if got := PerSecond(10).WithBurst(3).MaxCost(); got != 3 {
		t.Fatalf("explicit burst: %d", got)
	}
	if got := (Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Second, Burst: 99}).MaxCost(); got != 10 {
		t.Fatalf("windows ignore burst: %d", got)
	}
}

func TestPathString(t *testing.T) {
	for p, want := range map[Path]string{
		PathStore: "store", PathOpen: "open", PathClosed: "closed",
		PathLocal: "local", PathCache: "cache", PathCache + 1: "path(5)",
	} {
		if got := p.String(); got != want {
			t.Errorf("Path(%d).String() = %q, want %q", uint8(p), got, want)
		}
	}
}
