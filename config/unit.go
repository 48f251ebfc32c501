package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Unit is the time unit of an envoyproxy/ratelimit rate_limit block, named as
// RateLimitResponse.RateLimit.Unit in lower case (map it to the protobuf enum by name).
// As in the reference, a unit is a fixed length (a month 30 days, a year 365) and
// windows are aligned to the Unix epoch; see docs/configuration.md.
type Unit uint8

// The units, shortest first. UnitUnknown is the zero value and is never valid in a file.
const (
	UnitUnknown Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "week", "month", "year"}

var unitPeriods = [...]time.Duration{
	0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour,
}

// String returns the unit's lower-case name ("second").
func (u Unit) String() string { return enumName(unitNames[:], u, "unit") }

// enumName is names[v], or kind(v) for a value without a name.
func enumName[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// Period is the unit's length; 0 for UnitUnknown.
func (u Unit) Period() time.Duration {
	if int(u) < len(unitPeriods) {
		return unitPeriods[u]
	}
	return 0
}

// ParseUnit parses a unit name case-insensitively, as the reference does; "unknown" is
// an error.
func ParseUnit(s string) (Unit, error) {
	if i := slices.Index(unitNames[1:], strings.ToLower(strings.TrimSpace(s))); i >= 0 {
		return Unit(i + 1), nil
	}
	return UnitUnknown, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// UnitOf returns the unit whose Period is exactly d, if there is one.
func UnitOf(d time.Duration) (Unit, bool) {
	i := slices.Index(unitPeriods[1:], d)
	return Unit(i + 1), i >= 0
}

// ParsePeriod parses a policy's period: a positive Go duration ("90s", "24h") or one of
// second, minute, hour, day and week.
func ParsePeriod(s string) (time.Duration, error) {
	norm := strings.ToLower(strings.TrimSpace(s))
	if u, err := ParseUnit(norm); err == nil && u <= UnitWeek {
		return u.Period(), nil
	}
	d, err := time.ParseDuration(norm)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 1s, 1m or 24h, or one of second, minute, hour, day, week; got %q", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", s)
	}
	return d, nil
}
