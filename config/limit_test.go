package config

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestLimitSpecNamesTheField: every problem of a LimitSpec is a FieldError naming the
// field to change, including those only sluice.Limit.Validate finds.
func TestLimitSpecNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		spec  LimitSpec
		field string
	}{
		{LimitSpec{Algorithm: "nope", Rate: 1, Period: "1s"}, "algorithm"},
		{LimitSpec{Algorithm: "gcra", Rate: 1, Period: "calendar_month"}, "algorithm"},
		{LimitSpec{Rate: 0, Period: "1s"}, "rate"},
		{LimitSpec{Rate: 2_000_000, Period: "1s"}, "rate"},
		{LimitSpec{Rate: 1}, "period"},
		{LimitSpec{Rate: 1, Period: "fortnight"}, "period"},
		{LimitSpec{Rate: 1, Period: "1s", Lease: "5s"}, "lease"},
		{LimitSpec{Algorithm: "concurrency", Rate: 1}, "lease"},
		{LimitSpec{Algorithm: "concurrency", Rate: 1, Lease: "48h"}, "lease"},
		{LimitSpec{Algorithm: "concurrency", Rate: 1, Lease: "5s", Period: "1s"}, "period"},
		{LimitSpec{Rate: 1, Period: "1s", Zone: "Europe/Berlin"}, "zone"},
		{LimitSpec{Rate: 1, Period: "calendar_month", Zone: "X/Y"}, "zone"},
		{LimitSpec{Rate: 1, Period: "1s", AnchorDay: 3}, "anchor_day"},
		{LimitSpec{Rate: 1, Period: "calendar_week", AnchorDay: 9}, "anchor_day"},
		{LimitSpec{Rate: 1, Period: "1s", Burst: -1}, "burst"},
		{LimitSpec{Algorithm: "fixed_window", Rate: 1, Period: "1s", Burst: 5}, "burst"},
		{LimitSpec{Rate: 1, Period: "24h", Burst: 2_000_000}, "burst"},
	} {
		_, err := tc.spec.Limit(sluice.GCRA)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", tc.spec, err, tc.field)
		}
	}
	l, err := LimitSpec{Rate: 5, Period: "calendar_month", Zone: "Europe/Berlin", AnchorDay: 31}.Limit(sluice.GCRA)
	if err != nil || l.Algorithm != sluice.FixedWindow || l.Calendar.Anchor != 31 {
		t.Errorf("calendar: %v %v", l, err)
	}
	l, err = LimitSpec{Rate: 5, Period: "1m", Burst: 9}.Limit(sluice.TokenBucket)
	if err != nil || l != (sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 5, Period: time.Minute, Burst: 9}) {
		t.Errorf("inherited: %v %v", l, err)
	}
}

// TestSpecOfWritesTheLimit: SpecOf is the inverse of LimitSpec.Limit.
func TestSpecOfWritesTheLimit(t *testing.T) {
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.TokenBucket, Rate: 5, Period: time.Minute, Burst: 9},
		{Algorithm: sluice.SlidingWindow, Rate: 100, Period: 90 * time.Second},
		{Algorithm: sluice.Concurrency, Rate: 3, Lease: 30 * time.Second},
		sluice.PerCalendar(7, sluice.Calendar{Unit: sluice.CalendarMonth, Anchor: 31}),
	} {
		if got, err := SpecOf(l).Limit(sluice.GCRA); err != nil || got != l {
			t.Errorf("%v: SpecOf %+v reads as %v, %v", l, SpecOf(l), got, err)
		}
	}
	z, err := sluice.ParseZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	l := sluice.PerCalendar(7, sluice.Calendar{Unit: sluice.CalendarWeek, Zone: z})
	if got, err := SpecOf(l).Limit(sluice.GCRA); err != nil || got.String() != l.String() || got.Calendar.Zone.String() != "Europe/Berlin" {
		t.Errorf("%v: reads as %v, %v", l, got, err)
	}
}
