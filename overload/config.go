package overload

import (
	"errors"
	"fmt"
	"time"
)

// Config sets a Limiter's bounds, how it learns the limit from latency, the shares kept
// for higher criticalities, and its queue. The zero Config is usable: every zero field
// takes the default its comment names. Negative values are errors unless a field says
// what they mean.
type Config struct {
	// MinLimit and MaxLimit bound the limit, in requests in flight (defaults 4 and 1000).
	// The limit never leaves [MinLimit, MaxLimit], and it is MinLimit while Remeasure
	// pins it.
	MinLimit, MaxLimit int
	// InitialLimit is the limit before the first window has been measured (default 20,
	// clamped to [MinLimit, MaxLimit]).
	InitialLimit int

	// Window is how often the limit is recomputed (default 250ms): a window closes at the
	// first Release at least Window after it opened at which it holds MinSamples
	// latency samples (default 10); until then it goes on collecting. A shorter window
	// follows changes sooner and judges each change on fewer samples.
	Window     time.Duration
	MinSamples int
	// LongWindow is how many windows the long-term latency averages over (default 600):
	// the baseline the short-term latency of each window is compared with. A longer one
	// tolerates latency that rises with load for longer before it counts as normal; a
	// shorter one lets the limit recover sooner after the service itself slows down.
	LongWindow int
	// Tolerance is the percentage by which the short-term latency may exceed the long-term
	// one before the limit falls (default 50: up to 1.5 times). A higher tolerance admits
	// more queueing in the service, and so more latency, for more throughput.
	Tolerance int
	// Headroom is added to the limit at each window, in requests, before smoothing: the
	// queue the limit allows for in the service, and how fast the limit grows while the
	// latency is within Tolerance. 0 (the default) is ⌊√limit⌋.
	Headroom int
	// Remeasure is the period at which the limiter re-measures the service's latency
	// without queueing, as Envoy's adaptive concurrency filter re-measures its minimum
	// RTT (min_rtt_calc_interval): the limit is held at MinLimit for one window, that
	// window's latency becomes the long-term latency, and the limit returns to where it
	// was. 0 is the default, 1 minute; a negative value never re-measures, and then under
	// saturation lasting many LongWindows the limit creeps upward (see the package doc).
	Remeasure time.Duration

	// CriticalReserve is the percentage of the limit that only Critical requests may use
	// (default 20; a negative value reserves none): Default requests are admitted while
	// fewer than ⌊limit·(100 − CriticalReserve)/100⌋ requests are in flight.
	CriticalReserve int
	// DefaultReserve is the percentage of the limit that only Default and Critical
	// requests may use (default 0): Sheddable requests are admitted while fewer than
	// ⌊limit·(100 − CriticalReserve − DefaultReserve)/100⌋ are in flight. The two reserves
	// together may not exceed 100.
	DefaultReserve int

	// MaxWait is how long a Critical or Default request waits in the queue for a permit
	// when none is free to it; a negative value never queues, and Sheddable requests
	// never queue. 0 (the default) waits DefaultWaitLatencies times the long-term latency
	// when the request queues (1s before the first window has closed): in that time about
	// four limits' worth of permits end, enough to ride out a burst while the demand of
	// the classes above Sheddable is near the capacity; a request not admitted by then
	// stands behind more than the service finishes in four service times.
	MaxWait time.Duration
	// MaxQueue bounds the requests waiting (default 1000); a Default request arriving at a
	// full queue is shed, and a Critical one takes the place of the newest Default waiter.
	MaxQueue int

	// Clock is the limiter's time (nil: time.Now): latencies are differences of its
	// readings, and windows and Remeasure periods are measured on it.
	Clock func() time.Time
}

// Defaults of the zero fields.
const (
	DefaultMinLimit        = 4
	DefaultMaxLimit        = 1000
	DefaultInitialLimit    = 20
	DefaultWindow          = 250 * time.Millisecond
	DefaultMinSamples      = 10
	DefaultLongWindow      = 600
	DefaultTolerance       = 50
	DefaultRemeasure       = time.Minute
	DefaultCriticalReserve = 20
	DefaultMaxQueue        = 1000
	// DefaultMaxWait is the zero MaxWait's wait before the long-term latency is known,
	// and DefaultWaitLatencies its wait after, in long-term latencies.
	DefaultMaxWait       = time.Second
	DefaultWaitLatencies = 4
)

// ErrInvalidConfig is wrapped by every error New returns for a Config.
var ErrInvalidConfig = errors.New("overload: invalid config")

// settings is a validated Config with its defaults applied and the reserves turned
// into the shares of the limit each criticality may use.
type settings struct {
	min, max, initial int64 // requests
	window            int64 // ns
	minSamples        int64
	longWindow        int64
	tolerance         int64         // percent
	headroom          int64         // requests; 0: ⌊√limit⌋
	remeasure         int64         // ns; 0: never
	share             [3]int64      // percent of the limit usable by Sheddable, Default, Critical
	maxWait           time.Duration // 0: DefaultWaitLatencies long-term latencies
	queue             bool
	maxQueue          int
	clock             func() time.Time
}

// Validate reports whether c is usable, with an error that names the field and wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	_, err := c.settings()
	return err
}

func (c Config) settings() (settings, error) {
	bad := func(field string, format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MinLimit", int64(c.MinLimit)}, {"MaxLimit", int64(c.MaxLimit)}, {"InitialLimit", int64(c.InitialLimit)},
		{"Window", int64(c.Window)}, {"MinSamples", int64(c.MinSamples)}, {"LongWindow", int64(c.LongWindow)},
		{"Tolerance", int64(c.Tolerance)}, {"Headroom", int64(c.Headroom)},
		{"DefaultReserve", int64(c.DefaultReserve)}, {"MaxQueue", int64(c.MaxQueue)},
	} {
		if f.v < 0 {
			return bad(f.name, "must not be negative, got %d", f.v)
		}
	}
	s := settings{
		min: orDefault(c.MinLimit, DefaultMinLimit), max: orDefault(c.MaxLimit, DefaultMaxLimit),
		window: int64(c.Window), minSamples: orDefault(c.MinSamples, DefaultMinSamples),
		longWindow: orDefault(c.LongWindow, DefaultLongWindow), tolerance: orDefault(c.Tolerance, DefaultTolerance),
		headroom: int64(c.Headroom), remeasure: int64(c.Remeasure),
		maxWait: c.MaxWait, maxQueue: int(orDefault(c.MaxQueue, DefaultMaxQueue)), clock: c.Clock,
	}
	if s.window == 0 {
		s.window = int64(DefaultWindow)
	}
	switch {
	case s.remeasure == 0:
		s.remeasure = int64(DefaultRemeasure)
	case s.remeasure < 0:
		s.remeasure = 0
	}
	switch {
	case s.max > maxLimit:
		return bad("MaxLimit", "must be at most %d, got %d", maxLimit, s.max)
	case s.min > s.max:
		return bad("MinLimit", "%d exceeds MaxLimit %d", s.min, s.max)
	case s.tolerance > 1000:
		return bad("Tolerance", "must be at most 1000 (percent), got %d", s.tolerance)
	case s.headroom > s.max:
		return bad("Headroom", "%d exceeds MaxLimit %d", s.headroom, s.max)
	case s.longWindow > 1<<20:
		return bad("LongWindow", "must be at most %d windows, got %d", 1<<20, s.longWindow)
	case s.minSamples > 1<<20:
		return bad("MinSamples", "must be at most %d, got %d", 1<<20, s.minSamples)
	}
	s.initial = min(max(orDefault(c.InitialLimit, DefaultInitialLimit), s.min), s.max)
	critical := int64(c.CriticalReserve)
	switch {
	case critical == 0:
		critical = DefaultCriticalReserve
	case critical < 0:
		critical = 0
	}
	if critical+int64(c.DefaultReserve) > 100 {
		return bad("CriticalReserve", "%d and DefaultReserve %d exceed 100 percent together", critical, c.DefaultReserve)
	}
	s.share = [3]int64{100 - critical - int64(c.DefaultReserve), 100 - critical, 100}
	s.queue = s.maxWait >= 0
	s.maxWait = max(s.maxWait, 0)
	if s.clock == nil {
		s.clock = time.Now
	}
	return s, nil
}

// maxLimit bounds MaxLimit so that milli-permits times a gradient in thousandths stays
// far below 2^63.
const maxLimit = 1 << 30

func orDefault(v, d int) int64 {
	if v == 0 {
		return int64(d)
	}
	return int64(v)
}
