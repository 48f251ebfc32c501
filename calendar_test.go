package sluice_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBounds checks period bounds at the instants that break naive arithmetic:
// 29 February, DST changes both ways, anchors past a month's end, a zone 14 hours ahead.
func TestCalendarBounds(t *testing.T) {
	ny, berlin := mustZone(t, "America/New_York"), mustZone(t, "Europe/Berlin")
	kiri := mustZone(t, "Pacific/Kiritimati")
	date := func(loc *time.Location, y int, m time.Month, d, h int) time.Time {
		return time.Date(y, m, d, h, 0, 0, 0, loc)
	}
	tests := []struct {
		name       string
		c          sluice.Calendar
		at         time.Time
		start, end time.Time
	}{
		{"leap day", sluice.Calendar{Unit: sluice.CalendarDay}, date(time.UTC, 2028, 2, 29, 12),
			date(time.UTC, 2028, 2, 29, 0), date(time.UTC, 2028, 3, 1, 0)},
		{"leap February", sluice.Calendar{Unit: sluice.CalendarMonth}, date(time.UTC, 2028, 2, 29, 23),
			date(time.UTC, 2028, 2, 1, 0), date(time.UTC, 2028, 3, 1, 0)},
		{"common February", sluice.Calendar{Unit: sluice.CalendarMonth}, date(time.UTC, 2027, 2, 28, 23),
			date(time.UTC, 2027, 2, 1, 0), date(time.UTC, 2027, 3, 1, 0)},
		{"anchor 29 in a common year", sluice.Calendar{Unit: sluice.CalendarMonth, Anchor: 29}, date(time.UTC, 2027, 3, 1, 0),
			date(time.UTC, 2027, 2, 28, 0), date(time.UTC, 2027, 3, 29, 0)},
		{"anchor 29 in a leap year", sluice.Calendar{Unit: sluice.CalendarMonth, Anchor: 29}, date(time.UTC, 2028, 2, 28, 23),
			date(time.UTC, 2028, 1, 29, 0), date(time.UTC, 2028, 2, 29, 0)},
		{"leap year", sluice.Calendar{Unit: sluice.CalendarYear}, date(time.UTC, 2028, 12, 31, 23),
			date(time.UTC, 2028, 1, 1, 0), date(time.UTC, 2029, 1, 1, 0)},
		{"year anchor 366 in a common year", sluice.Calendar{Unit: sluice.CalendarYear, Anchor: 366}, date(time.UTC, 2027, 12, 31, 1),
			date(time.UTC, 2027, 12, 31, 0), date(time.UTC, 2028, 12, 31, 0)},
		{"New York spring forward day is 23h", sluice.Calendar{Unit: sluice.CalendarDay, Zone: zoneOf("America/New_York")}, date(ny, 2026, 3, 8, 12),
			date(ny, 2026, 3, 8, 0), date(ny, 2026, 3, 9, 0)},
		{"New York fall back day is 25h", sluice.Calendar{Unit: sluice.CalendarDay, Zone: zoneOf("America/New_York")}, date(ny, 2026, 11, 1, 12),
			date(ny, 2026, 11, 1, 0), date(ny, 2026, 11, 2, 0)},
		{"Berlin spring forward", sluice.Calendar{Unit: sluice.CalendarDay, Zone: zoneOf("Europe/Berlin")}, date(berlin, 2026, 3, 29, 3),
			date(berlin, 2026, 3, 29, 0), date(berlin, 2026, 3, 30, 0)},
		{"Berlin fall back", sluice.Calendar{Unit: sluice.CalendarDay, Zone: zoneOf("Europe/Berlin")}, date(berlin, 2026, 10, 25, 2),
			date(berlin, 2026, 10, 25, 0), date(berlin, 2026, 10, 26, 0)},
		{"Berlin March across DST", sluice.Calendar{Unit: sluice.CalendarMonth, Zone: zoneOf("Europe/Berlin")}, date(berlin, 2026, 3, 31, 23),
			date(berlin, 2026, 3, 1, 0), date(berlin, 2026, 4, 1, 0)},
		{"ISO week from Monday", sluice.Calendar{Unit: sluice.CalendarWeek}, date(time.UTC, 2026, 12, 6, 23), // a Sunday
			date(time.UTC, 2026, 11, 30, 0), date(time.UTC, 2026, 12, 7, 0)},
		{"week from Wednesday", sluice.Calendar{Unit: sluice.CalendarWeek, Anchor: 3}, date(time.UTC, 2026, 12, 1, 12), // a Tuesday
			date(time.UTC, 2026, 11, 25, 0), date(time.UTC, 2026, 12, 2, 0)},
		{"Kiritimati is a day ahead of UTC", sluice.Calendar{Unit: sluice.CalendarDay, Zone: zoneOf("Pacific/Kiritimati")}, date(time.UTC, 2026, 12, 31, 10),
			date(kiri, 2027, 1, 1, 0), date(kiri, 2027, 1, 2, 0)},
		{"Kiritimati new year", sluice.Calendar{Unit: sluice.CalendarYear, Zone: zoneOf("Pacific/Kiritimati")}, date(time.UTC, 2026, 12, 31, 9),
			date(kiri, 2026, 1, 1, 0), date(kiri, 2027, 1, 1, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := sluice.PerCalendar(1, tt.c).Validate(); err != nil {
				t.Fatal(err)
			}
			start, end := tt.c.Bounds(tt.at)
			if !start.Equal(tt.start) || !end.Equal(tt.end) {
				t.Fatalf("Bounds(%v) = [%v, %v), want [%v, %v)", tt.at, start, end, tt.start, tt.end)
			}
			// The bounds are a period's: the instant just before the end and the start are
			// in it, the end starts the next.
			if s, _ := tt.c.Bounds(start); !s.Equal(start) {
				t.Errorf("Bounds(start) starts at %v", s)
			}
			if s, _ := tt.c.Bounds(end.Add(-time.Nanosecond)); !s.Equal(start) {
				t.Errorf("Bounds(end-1ns) starts at %v", s)
			}
			if s, _ := tt.c.Bounds(end); !s.Equal(end) {
				t.Errorf("Bounds(end) starts at %v, want %v", s, end)
			}
		})
	}
	ny23, ny25 := tests[7], tests[8]
	if d := ny23.end.Sub(ny23.start); d != 23*time.Hour {
		t.Errorf("spring-forward day is %v", d)
	}
	if d := ny25.end.Sub(ny25.start); d != 25*time.Hour {
		t.Errorf("fall-back day is %v", d)
	}
}

// TestCalendarAnchor31 walks an anchor on the 31st through every month of a leap and a
// common year: each period starts on the month's last day when it has fewer than 31.
func TestCalendarAnchor31(t *testing.T) {
	c := sluice.Calendar{Unit: sluice.CalendarMonth, Zone: zoneOf("Europe/Berlin"), Anchor: 31}
	loc := mustZone(t, "Europe/Berlin")
	for _, year := range []int{2027, 2028} {
		for m := time.January; m <= time.December; m++ {
			last := time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
			want := time.Date(year, m, last, 0, 0, 0, 0, loc)
			start, end := c.Bounds(want.Add(time.Hour))
			if !start.Equal(want) {
				t.Errorf("%d-%02d: period starts %v, want %v", year, m, start, want)
			}
			nextLast := time.Date(year, m+2, 0, 0, 0, 0, 0, time.UTC).Day()
			if wantEnd := time.Date(year, m+1, nextLast, 0, 0, 0, 0, loc); !end.Equal(wantEnd) {
				t.Errorf("%d-%02d: period ends %v, want %v", year, m, end, wantEnd)
			}
			if s, _ := c.Bounds(want.Add(-time.Nanosecond)); s.Equal(want) {
				t.Errorf("%d-%02d: the instant before the start is in the period", year, m)
			}
		}
	}
}

func TestCalendarValidate(t *testing.T) {
	bad := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 10, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth}},
		{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth}},
		{Algorithm: sluice.FixedWindow, Rate: 10, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth, Anchor: 32}},
		{Algorithm: sluice.FixedWindow, Rate: 10, Calendar: sluice.Calendar{Unit: sluice.CalendarWeek, Anchor: 8}},
		{Algorithm: sluice.FixedWindow, Rate: 10, Calendar: sluice.Calendar{Unit: sluice.CalendarDay, Anchor: 2}},
		{Algorithm: sluice.FixedWindow, Rate: 0, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth}},
	}
	for _, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("%v: Validate accepted it", l)
		}
	}
	if err := sluice.PerCalendar(1000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: zoneOf("Europe/Berlin"), Anchor: 15}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestZone checks that a Zone is a handle that names its zone: equal for equal names,
// the zero Zone for "" (UTC), an error for an unknown name, and text that round-trips.
func TestZone(t *testing.T) {
	if _, err := sluice.ParseZone("Mars/Olympus"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("unknown zone: %v, want ErrInvalidLimit", err)
	}
	a, b := zoneOf("Europe/Berlin"), zoneOf("Europe/Berlin")
	if a != b || a == (sluice.Zone{}) || a == zoneOf("America/New_York") {
		t.Errorf("zones of one name differ, or match another: %v %v", a, b)
	}
	if a.String() != "Europe/Berlin" || sluice.ZoneLocation(a).String() != "Europe/Berlin" {
		t.Errorf("zone names %q, location %v", a.String(), sluice.ZoneLocation(a))
	}
	if z, err := sluice.ParseZone(""); err != nil || z != (sluice.Zone{}) || sluice.ZoneLocation(z) != time.UTC || z.String() != "" {
		t.Errorf(`ParseZone("") = %v, %v`, z, err)
	}
	// "UTC" is kept as written, as the Redis store's keys hold it, though it decides as
	// the zero Zone does.
	if u := zoneOf("UTC"); u == (sluice.Zone{}) || u.String() != "UTC" || sluice.ZoneLocation(u) != time.UTC {
		t.Errorf("UTC: %v %v", u, sluice.ZoneLocation(u))
	}
	type doc struct {
		Zone sluice.Zone `json:"zone"`
	}
	for _, z := range []sluice.Zone{{}, a} {
		raw, err := json.Marshal(doc{z})
		if err != nil {
			t.Fatal(err)
		}
		var back doc
		if err := json.Unmarshal(raw, &back); err != nil || back.Zone != z {
			t.Errorf("%s: round trip gave %v, %v", raw, back.Zone, err)
		}
	}
	var d struct{ Zone sluice.Zone }
	if err := json.Unmarshal([]byte(`{"Zone":"Mars/Olympus"}`), &d); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("unknown zone in JSON: %v", err)
	}
}

// zoneOf is sluice.ParseZone of a name known to be valid.
func zoneOf(name string) sluice.Zone {
	z, err := sluice.ParseZone(name)
	if err != nil {
		panic(err)
	}
	return z
}
