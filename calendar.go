package sluice

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // calendar zones resolve in a container without /usr/share/zoneinfo
)

// CalendarUnit is the length of a calendar period. The zero value means a Limit is not a
// calendar quota: its windows are Period long.
type CalendarUnit uint8

const (
	// CalendarDay: from local midnight to the next (23, 24 or 25 hours across DST).
	CalendarDay CalendarUnit = iota + 1
	// CalendarWeek: an ISO week, from local midnight on Monday (or the anchor weekday).
	CalendarWeek
	// CalendarMonth: from local midnight on the 1st (or the anchor day) of one month to
	// the same day of the next.
	CalendarMonth
	// CalendarYear: from local midnight on 1 January (or the anchor day of the year).
	CalendarYear
)

var calendarNames = [...]string{"", "calendar_day", "calendar_week", "calendar_month", "calendar_year"}

// String returns the unit's configuration name ("calendar_month"), "" for the zero unit.
func (u CalendarUnit) String() string { return enumName(calendarNames[:], u, "calendar") }

// Calendar makes a FixedWindow Limit count per calendar period: its windows are bounded
// by local midnights in Zone, not by multiples of Period since the Unix epoch. The zero
// Calendar is no calendar.
//
// Anchor moves the period start: for CalendarMonth the day of the month (1–31; a day
// past the end of a shorter month means its last day, so 31 is always the last day of
// the month), for CalendarWeek the ISO weekday (1 Monday – 7 Sunday), for CalendarYear
// the day of the year (1–366; 366 is 31 December in common years). 0 means 1. It must be
// 0 for CalendarDay. The zero Zone is UTC. Midnight in a zone whose clocks skip it (a DST
// change at 00:00) is the instant Go's time.Date gives.
type Calendar struct {
	Unit   CalendarUnit
	Zone   Zone
	Anchor int
}

// IsZero reports whether c is no calendar.
func (c Calendar) IsZero() bool { return c == Calendar{} }

// String formats c as "calendar_month Europe/Berlin anchor 15".
func (c Calendar) String() string {
	s := c.Unit.String()
	if z := c.Zone.String(); z != "" {
		s += " " + z
	}
	if c.Anchor > 1 {
		s += fmt.Sprintf(" anchor %d", c.Anchor)
	}
	return s
}

// validate reports whether c can bound windows; the error wraps ErrInvalidLimit. Its
// Zone is valid by construction (see ParseZone).
func (c Calendar) validate() error {
	if c.IsZero() {
		return nil
	}
	anchors := [...]int{CalendarDay: 1, CalendarWeek: 7, CalendarMonth: 31, CalendarYear: 366}
	if c.Unit == 0 || int(c.Unit) >= len(anchors) {
		return fmt.Errorf("%w: unknown calendar unit %d", ErrInvalidLimit, uint8(c.Unit))
	}
	switch max := anchors[c.Unit]; {
	case c.Anchor >= 0 && c.Anchor <= max:
		return nil
	case c.Unit == CalendarDay:
		return fmt.Errorf("%w: calendar_day takes no anchor day, got %d", ErrInvalidLimit, c.Anchor)
	default:
		return fmt.Errorf("%w: anchor day %d of %v is outside 1..%d", ErrInvalidLimit, c.Anchor, c.Unit, max)
	}
}

// Zone is the time zone of a Calendar: a small comparable handle to a location, made by
// ParseZone. The zero Zone is UTC. Zones of the same name are equal, so Limits that name
// the same zone are equal, as a store's state per (key, Limit) needs; the handle holds no
// pointer, so a Limit stays a plain value that copies and compares cheaply.
type Zone struct {
	id uint32 // index into zones.list; 0 is the zero Zone
}

// zones interns every zone ParseZone has resolved, by the name it was given. Only names
// that time.LoadLocation accepts are interned.
var zones struct {
	mu     sync.Mutex
	byName map[string]Zone
	list   atomic.Pointer[[]zoneEntry] // append-only; copied on growth
}

type zoneEntry struct {
	name string
	loc  *time.Location
}

func init() {
	zones.byName = map[string]Zone{}
	zones.list.Store(&[]zoneEntry{{name: "", loc: time.UTC}})
}

// ParseZone returns the Zone of an IANA name ("Europe/Berlin"), as time.LoadLocation
// reads it; "" is the zero Zone (UTC). An unknown name is an error wrapping
// ErrInvalidLimit.
func ParseZone(name string) (Zone, error) {
	if name == "" {
		return Zone{}, nil
	}
	zones.mu.Lock()
	defer zones.mu.Unlock()
	if z, ok := zones.byName[name]; ok {
		return z, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return Zone{}, fmt.Errorf("%w: zone %q: %v", ErrInvalidLimit, name, err)
	}
	list := *zones.list.Load()
	z := Zone{id: uint32(len(list))}
	next := append(list[:len(list):len(list)], zoneEntry{name: name, loc: loc})
	zones.list.Store(&next)
	zones.byName[name] = z
	return z, nil
}

func (z Zone) entry() zoneEntry { return (*zones.list.Load())[z.id] }

// String returns the name the Zone was parsed from; "" for the zero Zone.
func (z Zone) String() string { return z.entry().name }

// location returns the zone's location; time.UTC for the zero Zone.
func (z Zone) location() *time.Location { return z.entry().loc }

// MarshalText implements encoding.TextMarshaler, as String.
func (z Zone) MarshalText() ([]byte, error) { return []byte(z.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, as ParseZone.
func (z *Zone) UnmarshalText(b []byte) error {
	v, err := ParseZone(string(b))
	if err != nil {
		return err
	}
	*z = v
	return nil
}

// Bounds returns the calendar period holding t: start ≤ t < end. It returns zero times
// for a Calendar that no valid Limit holds (see [Limit.Validate]).
func (c Calendar) Bounds(t time.Time) (start, end time.Time) {
	if c.validate() != nil || c.IsZero() {
		return time.Time{}, time.Time{}
	}
	loc := c.Zone.location()
	lt := t.In(loc)
	y, m, d := lt.Date()
	start = c.startNear(y, m, d, loc)
	for start.After(t) {
		start = c.step(start, loc, -1)
	}
	for end = c.step(start, loc, 1); !end.After(t); end = c.step(start, loc, 1) {
		start = end
	}
	return start, end
}

// startNear is a period start within one period of the local date y-m-d.
func (c Calendar) startNear(y int, m time.Month, d int, loc *time.Location) time.Time {
	switch c.Unit {
	case CalendarWeek:
		day := time.Date(y, m, d, 0, 0, 0, 0, loc)
		wd := (int(day.Weekday())+6)%7 + 1 // ISO: Monday 1 .. Sunday 7
		back := (wd - max(c.Anchor, 1) + 7) % 7
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc)
	case CalendarMonth:
		return monthStart(y, m, c.Anchor, loc)
	case CalendarYear:
		return yearStart(y, c.Anchor, loc)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

// step is the start of the period k periods after the one starting at s (before it for
// k < 0).
func (c Calendar) step(s time.Time, loc *time.Location, k int) time.Time {
	y, m, d := s.In(loc).Date()
	switch c.Unit {
	case CalendarWeek:
		return time.Date(y, m, d+7*k, 0, 0, 0, 0, loc)
	case CalendarMonth:
		return monthStart(y, m+time.Month(k), c.Anchor, loc)
	case CalendarYear:
		return yearStart(y+k, c.Anchor, loc)
	}
	return time.Date(y, m, d+k, 0, 0, 0, 0, loc)
}

// monthStart is local midnight on the anchor day of month m of year y (m may be out of
// 1..12; it is normalised), the month's last day when the month is shorter.
func monthStart(y int, m time.Month, anchor int, loc *time.Location) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	y, m = first.Year(), first.Month()
	last := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	return time.Date(y, m, min(max(anchor, 1), last), 0, 0, 0, 0, loc)
}

// yearStart is local midnight on the anchor day of year y, 31 December when the year is
// shorter.
func yearStart(y, anchor int, loc *time.Location) time.Time {
	days := time.Date(y, 12, 31, 0, 0, 0, 0, time.UTC).YearDay()
	return time.Date(y, 1, min(max(anchor, 1), days), 0, 0, 0, 0, loc)
}
