package config

import (
	"cmp"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/overload"
)

// Overload is the top-level overload block: the adaptive concurrency limit `sluice
// proxy` puts in front of its upstream (package overload), and where a request's
// criticality comes from. docs/overload.md describes every setting.
//
// A request's criticality is, in order: the value of CriticalityHeader, when a trusted
// proxy (identity.trusted_proxies) sent one the overload package knows; else the highest
// criticality set on the policies and routes the request matches; else
// DefaultCriticality.
type Overload struct {
	// Limiter is the limit's settings as the file writes them, each zero field taking
	// the default package overload documents. critical_reserve: 0 is written here as a
	// negative CriticalReserve (no reserve), and remeasure: off and max_wait: off as
	// negative durations.
	Limiter overload.Config
	// CriticalityHeader is criticality_header: the request header that names a request's
	// criticality, believed only from identity.trusted_proxies. Empty: none is read.
	CriticalityHeader string
	// DefaultCriticality is default_criticality: the criticality of a request that
	// neither a trusted header nor a policy or route gives one (default: default).
	DefaultCriticality overload.Criticality
	// Pos is where the block starts (its key).
	Pos Position
}

// SameLimit reports whether o and p set the same limit (Limiter; the criticality header
// and default aside): whether a reload that replaced o by p keeps o's limiter, with its
// learned limit and the requests in flight.
func (o *Overload) SameLimit(p *Overload) bool {
	if o == nil || p == nil {
		return o == p
	}
	a, b := o.Limiter, p.Limiter
	a.Clock, b.Clock = nil, nil // never set by a file; funcs are not comparable
	return reflect.DeepEqual(a, b)
}

var overloadFields = []string{
	"min_limit", "max_limit", "initial_limit", "window", "min_samples", "long_window", "tolerance",
	"headroom", "remeasure", "critical_reserve", "default_reserve", "max_wait", "max_queue",
	"criticality_header", "default_criticality",
}

// overload reads the overload block.
func (d *decoder) overload(n *yaml.Node) *Overload {
	o := d.object(n, "overload", overloadFields...)
	if o == nil {
		return nil
	}
	ov := &Overload{}
	c := &ov.Limiter
	errs := len(d.errs)
	read(o, "min_limit", &c.MinLimit, intIn[int](d, 1, 1<<30))
	read(o, "max_limit", &c.MaxLimit, intIn[int](d, 1, 1<<30))
	read(o, "initial_limit", &c.InitialLimit, intIn[int](d, 1, 1<<30))
	read(o, "min_samples", &c.MinSamples, intIn[int](d, 1, 1<<20))
	read(o, "long_window", &c.LongWindow, intIn[int](d, 1, 1<<20))
	read(o, "tolerance", &c.Tolerance, intIn[int](d, 1, 1000))
	read(o, "headroom", &c.Headroom, intIn[int](d, 1, 1<<30))
	read(o, "default_reserve", &c.DefaultReserve, intIn[int](d, 0, 100))
	read(o, "max_queue", &c.MaxQueue, intIn[int](d, 1, 1<<20))
	if read(o, "critical_reserve", &c.CriticalReserve, intIn[int](d, 0, 100)) && c.CriticalReserve == 0 {
		c.CriticalReserve = -1 // none: overload's 0 is its default
	}
	read(o, "window", &c.Window, d.duration)
	c.Remeasure = d.durationOrOff(o, "remeasure")
	c.MaxWait = d.durationOrOff(o, "max_wait")

	lo := cmp.Or(c.MinLimit, overload.DefaultMinLimit)
	hi := cmp.Or(c.MaxLimit, overload.DefaultMaxLimit)
	if lo > hi {
		v, ok := o.get("min_limit")
		if !ok {
			v, _ = o.get("max_limit")
		}
		d.errorf(v, o.field("min_limit"), "%d exceeds max_limit %d", lo, hi)
	}
	if v, ok := o.get("headroom"); ok && c.Headroom > hi {
		d.errorf(v, o.field("headroom"), "%d exceeds max_limit %d", c.Headroom, hi)
	}
	if v, ok := o.get("default_reserve"); ok {
		critical := c.CriticalReserve
		switch {
		case critical == 0:
			critical = overload.DefaultCriticalReserve
		case critical < 0:
			critical = 0
		}
		if critical+c.DefaultReserve > 100 {
			d.errorf(v, o.field("default_reserve"), "%d and critical_reserve %d exceed 100 percent together",
				c.DefaultReserve, critical)
		}
	}
	if len(d.errs) == errs {
		// Whatever the checks above missed, the limiter itself refuses.
		if err := c.Validate(); err != nil {
			msg := strings.TrimPrefix(err.Error(), overload.ErrInvalidConfig.Error()+": ")
			d.errorf(n, "overload", "%s", msg)
		}
	}

	read(o, "criticality_header", &ov.CriticalityHeader, d.header)
	if v, ok := o.get("default_criticality"); ok {
		if cr, ok := d.criticality(v, o.field("default_criticality")); ok {
			ov.DefaultCriticality = *cr
		}
	}
	return ov
}

// criticality reads a criticality by name: critical, default or sheddable (and the _plus
// forms overload.ParseCriticality knows).
func (d *decoder) criticality(n *yaml.Node, path string) (*overload.Criticality, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return nil, false
	}
	c, ok := overload.ParseCriticality(s)
	if !ok {
		d.errorf(n, path, "must be critical, default or sheddable, got %q", s)
		return nil, false
	}
	return &c, true
}

// durationOrOff reads a positive Go duration, or off (returned as -1ns: package
// overload's "never"); zero when the field is not set.
func (d *decoder) durationOrOff(o *object, name string) time.Duration {
	v, ok := o.get(name)
	if !ok {
		return 0
	}
	s, ok := d.str(v, o.field(name))
	if !ok {
		return 0
	}
	if strings.EqualFold(s, "off") {
		return -1
	}
	x, err := time.ParseDuration(s)
	if err != nil || x <= 0 {
		d.errorf(v, o.field(name), "must be a positive duration such as 500ms, or off, got %q", s)
		return 0
	}
	return x
}
