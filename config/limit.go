package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// LimitSpec is a limit as an operator writes it (in a file or through the admin API). A
// zero field is not set.
type LimitSpec struct {
	// Algorithm is a name sluice.ParseAlgorithm reads; empty inherits one.
	Algorithm string `json:"algorithm,omitempty"`
	Rate      int64  `json:"rate"`
	// Period is what [ParsePeriod] or [ParseCalendarUnit] reads; none for concurrency.
	Period string `json:"period,omitempty"`
	Burst  int64  `json:"burst,omitempty"`
	// Lease is the longest a concurrency limit's slot is held, as [ParsePeriod] reads it.
	Lease string `json:"lease,omitempty"`
	// Zone and AnchorDay apply to calendar periods only.
	Zone      string `json:"zone,omitempty"`
	AnchorDay int    `json:"anchor_day,omitempty"`
}

// SpecOf is the LimitSpec that writes l: SpecOf(l).Limit(a) is l for every valid l.
func SpecOf(l sluice.Limit) LimitSpec {
	s := LimitSpec{Algorithm: l.Algorithm.String(), Rate: l.Rate, Burst: l.Burst}
	switch {
	case l.Algorithm == sluice.Concurrency:
		s.Lease = l.Lease.String()
	case !l.Calendar.IsZero():
		s.Period, s.Zone, s.AnchorDay = l.Calendar.Unit.String(), l.Calendar.Zone.String(), l.Calendar.Anchor
	default:
		s.Period = l.Period.String()
	}
	return s
}

// FieldError is a problem with one field of a [LimitSpec], named as written ("rate");
// Err, when set, wraps sluice.ErrInvalidLimit.
type FieldError struct {
	Field string
	Msg   string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Limit is the validated sluice.Limit s describes, taking the algorithm inherit when s
// names none (fixed_window for a calendar period). The error joins a [*FieldError] per
// field at fault, in field order.
func (s LimitSpec) Limit(inherit sluice.Algorithm) (sluice.Limit, error) {
	return s.limit(inherit, "period: calendar_day, calendar_week, calendar_month or calendar_year")
}

// limit is Limit, where needs says how the file asks for a calendar period.
func (s LimitSpec) limit(inherit sluice.Algorithm, needs string) (sluice.Limit, error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	l := sluice.Limit{Algorithm: inherit, Rate: s.Rate, Burst: s.Burst}
	if s.Algorithm != "" {
		a, err := sluice.ParseAlgorithm(s.Algorithm)
		if err != nil {
			fail("algorithm", "unknown algorithm %q (want one of %s)", s.Algorithm, algorithmList())
		} else {
			l.Algorithm = a
		}
	}
	switch {
	case s.Rate < 1:
		fail("rate", "must be positive, got %d", s.Rate)
	case s.Rate > store.MaxRate:
		fail("rate", "must be between 1 and %d, got %d", int64(store.MaxRate), s.Rate)
	}
	if l.Algorithm == sluice.Concurrency {
		if s.Period != "" {
			fail("period", "is not used by concurrency limits; a request holds its slot until it ends or its lease expires (lease)")
		}
		if s.Lease == "" {
			fail("lease", "is required for a concurrency limit: the longest a request holds its slot, e.g. 30s")
		} else if p, err := ParsePeriod(s.Lease); err != nil {
			fail("lease", "%v", err)
		} else {
			l.Lease = p
		}
	} else {
		if s.Lease != "" {
			fail("lease", "applies only to concurrency limits; %s ignores it", l.Algorithm)
		}
		if u, cal := ParseCalendarUnit(s.Period); cal {
			l.Calendar.Unit = u
			if s.Algorithm != "" && l.Algorithm != sluice.FixedWindow {
				fail("algorithm", "a %s period is counted by fixed_window, not %s", s.Period, l.Algorithm)
			}
			l.Algorithm = sluice.FixedWindow
		} else if s.Period == "" {
			fail("period", "is required")
		} else if p, err := ParsePeriod(s.Period); err != nil {
			fail("period", "%v", err)
		} else if p > store.MaxPeriod {
			fail("period", "must be at most %v", store.MaxPeriod)
		} else {
			l.Period = p
		}
	}
	if s.Zone != "" {
		z, err := sluice.ParseZone(s.Zone)
		switch {
		case l.Calendar.IsZero():
			fail("zone", "applies only to calendar periods (%s)", needs)
		case err != nil:
			fail("zone", "unknown time zone %q (want an IANA name such as Europe/Berlin)", s.Zone)
		default:
			l.Calendar.Zone = z
		}
	}
	if s.AnchorDay != 0 {
		switch {
		case l.Calendar.IsZero():
			fail("anchor_day", "applies only to calendar periods (%s)", needs)
		case s.AnchorDay < 1 || s.AnchorDay > 366:
			fail("anchor_day", "must be between 1 and 366, got %d", s.AnchorDay)
		default:
			l.Calendar.Anchor = s.AnchorDay
			if err := sluice.PerCalendar(1, l.Calendar).Validate(); err != nil {
				errs = append(errs, invalid("anchor_day", err))
			}
		}
	}
	if s.Burst != 0 {
		switch l.Algorithm {
		case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
			if s.Burst < 0 || s.Burst > store.MaxRate {
				fail("burst", "must be between 1 and %d, got %d", int64(store.MaxRate), s.Burst)
			}
		default:
			fail("burst", "applies only to gcra, token_bucket and leaky_bucket; %s ignores it", l.Algorithm)
		}
	}
	if len(errs) > 0 {
		return l, errors.Join(errs...)
	}
	if err := l.Validate(); err != nil {
		return l, invalid(faultOf(l), err)
	}
	return l, nil
}

// faultOf names the field of l, which fails Validate, to change: the burst if that
// suffices, else the lease of a concurrency limit, else the rate.
func faultOf(l sluice.Limit) string {
	if nb := l; l.Burst != 0 {
		nb.Burst = 0
		if nb.Validate() == nil {
			return "burst"
		}
	}
	if l.Algorithm == sluice.Concurrency {
		return "lease"
	}
	return "rate"
}

// invalid is err, which wraps sluice.ErrInvalidLimit, as a problem of field.
func invalid(field string, err error) *FieldError {
	return &FieldError{Field: field, Msg: strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "), Err: err}
}

// fieldErrors lists the problems of a [LimitSpec.Limit] error.
func fieldErrors(err error) []*FieldError {
	if fe, ok := err.(*FieldError); ok {
		return []*FieldError{fe}
	}
	var out []*FieldError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	}
	return out
}
