package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/priority"
	"github.com/sluicehq/sluice/overload"
)

// A protection stands between the load and the upstream and decides which requests reach
// it. The in-process ones wrap the upstream's handler, as httplimit's middleware wraps a
// service; one in another process (sluice proxy) starts there and forwards to up's URL.
type protection interface {
	name() string
	// start puts the protection in front of up, which serves at upURL, and returns the
	// URL the load is sent to.
	start(up *upstream, upURL string) (string, error)
	// gauge reports the protection's limit and the requests it holds now.
	gauge() gauge
	stop()
}

// criticality is the class of a request, sent in headerCriticality. The bench sets it
// itself, so every protection may believe it.
type criticality int

const (
	critical criticality = iota
	sheddable
)

const headerCriticality = "X-Criticality"

func (c criticality) String() string {
	if c == critical {
		return "critical"
	}
	return "sheddable"
}

func criticalityOf(r *http.Request) criticality {
	if r.Header.Get(headerCriticality) == "critical" {
		return critical
	}
	return sheddable
}

// problemReducedCapacity is draft-ietf-httpapi-ratelimit-headers' problem type for a
// request refused because the service is overloaded, not because a client spent a quota.
const problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

// shed answers a request the protection refused: 503, Retry-After and a problem of type
// temporary-reduced-capacity.
func shed(w http.ResponseWriter, by string, retryAfter time.Duration) {
	h := w.Header()
	h.Set(headerRejected, by)
	h.Set("Retry-After", strconv.Itoa(max(1, int((retryAfter+time.Second-1)/time.Second))))
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, `{"type":%q,"title":"Service Unavailable","status":503}`+"\n", problemReducedCapacity)
}

// middleware is a protection that wraps the upstream's handler in this process.
type middleware struct {
	label  string
	wrap   func(next http.Handler) http.Handler
	gauges func() gauge
	done   func()
	srv    *http.Server
}

func (m *middleware) name() string { return m.label }

func (m *middleware) gauge() gauge { return m.gauges() }

func (m *middleware) start(up *upstream, _ string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	m.srv = &http.Server{Handler: m.wrap(up), ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

func (m *middleware) stop() {
	m.srv.Close()
	if m.done != nil {
		m.done()
	}
}

// unprotected lets every request through, counting those in flight.
func unprotected() protection {
	var inflight atomic.Int64
	return &middleware{
		label: "none",
		wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inflight.Add(1)
				defer inflight.Add(-1)
				next.ServeHTTP(w, r)
			})
		},
		gauges: func() gauge { return gauge{Inflight: int(inflight.Load())} },
	}
}

// fixedLimit admits at most n requests at once and sheds the rest at once, whatever their
// criticality.
func fixedLimit(n int) protection {
	slots := make(chan struct{}, n)
	return &middleware{
		label: "fixed",
		wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case slots <- struct{}{}:
				default:
					shed(w, "fixed", time.Second)
					return
				}
				defer func() { <-slots }()
				next.ServeHTTP(w, r)
			})
		},
		gauges: func() gauge { return gauge{Limit: n, Inflight: len(slots)} },
	}
}

// gauge is what a protection holds at one moment: its limit (0: none), the requests it
// has let through that have not finished, and those it keeps waiting for a slot.
type gauge struct {
	Limit    int `json:"limit"`
	Inflight int `json:"inflight"`
	Queued   int `json:"queued"`
}

// adaptiveSettings are failsafe-go adaptivelimiter's settings, one flag each.
type adaptiveSettings struct {
	MinLimit        uint          `json:"min_limit"`
	MaxLimit        uint          `json:"max_limit"`
	InitialLimit    uint          `json:"initial_limit"`
	MaxLimitFactor  float64       `json:"max_limit_factor"`
	StabilizeWindow time.Duration `json:"max_limit_stabilization_window_ns"`
	WindowMin       time.Duration `json:"recent_window_min_ns"`
	WindowMax       time.Duration `json:"recent_window_max_ns"`
	WindowSamples   uint          `json:"recent_window_min_samples"`
	Quantile        float64       `json:"recent_quantile"`
	BaselineAge     uint          `json:"baseline_age"`
	Correlation     uint          `json:"correlation_window"`
	QueueInitial    float64       `json:"queue_initial_rejection_factor"`
	QueueMax        float64       `json:"queue_max_rejection_factor"`
	MaxWait         time.Duration `json:"max_wait_ns"`           // the longest a request waits for a permit; < 0: until its client gives up
	ShedWait        time.Duration `json:"max_wait_sheddable_ns"` // the same for sheddable requests; < 0: MaxWait
	Calibration     time.Duration `json:"calibration_interval_ns"`
}

// priorityOf maps a criticality to failsafe-go's priorities: critical to VeryHigh (levels
// 400–499), sheddable to VeryLow (0–99), so that any rejection rate up to the sheddable
// share rejects sheddable requests only.
func priorityOf(c criticality) priority.Priority {
	if c == critical {
		return priority.VeryHigh
	}
	return priority.VeryLow
}

// adaptive is failsafe-go's PriorityLimiter: an adaptive concurrency limit learned from
// latency, with a queue in front of it from which the lowest priorities are rejected
// first. A refused request is shed with 503 and Retry-After.
func adaptive(s adaptiveSettings) protection {
	p := adaptivelimiter.NewPrioritizerBuilder().Build()
	b := adaptivelimiter.NewBuilder[any]().
		WithLimits(s.MinLimit, s.MaxLimit, s.InitialLimit).
		WithMaxLimitFactor(s.MaxLimitFactor).
		WithRecentWindow(s.WindowMin, s.WindowMax, s.WindowSamples).
		WithRecentQuantile(s.Quantile).
		WithBaselineWindow(s.BaselineAge).
		WithCorrelationWindow(s.Correlation).
		WithQueueing(s.QueueInitial, s.QueueMax)
	if s.StabilizeWindow > 0 {
		b = b.WithMaxLimitStabilizationWindow(s.StabilizeWindow)
	}
	lim := b.BuildPrioritized(p)
	stopCalibrating := p.ScheduleCalibrations(context.Background(), s.Calibration)
	return &middleware{
		label: "failsafe-go",
		wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				class := criticalityOf(r)
				prio, wait := priorityOf(class), s.MaxWait
				if class == sheddable && s.ShedWait >= 0 {
					wait = s.ShedWait
				}
				var permit adaptivelimiter.Permit
				var err error
				if wait < 0 {
					permit, err = lim.AcquirePermitWithPriority(r.Context(), prio)
				} else {
					permit, err = lim.AcquirePermitWithMaxWait(priority.ContextWithPriority(r.Context(), prio), wait)
				}
				switch {
				case errors.Is(err, adaptivelimiter.ErrExceeded):
					shed(w, "failsafe-go", time.Second)
					return
				case err != nil: // the client has gone
					return
				}
				next.ServeHTTP(w, r)
				permit.Record()
			})
		},
		gauges: func() gauge { return gauge{Limit: lim.Limit(), Inflight: lim.Inflight(), Queued: lim.Queued()} },
		done:   stopCalibrating,
	}
}

// sluiceSettings are the overload.Config fields the -sl-* flags set; 0 takes the
// package's default.
type sluiceSettings struct {
	MinLimit        int           `json:"min_limit"`
	MaxLimit        int           `json:"max_limit"`
	InitialLimit    int           `json:"initial_limit"`
	Window          time.Duration `json:"window_ns"`
	MinSamples      int           `json:"min_samples"`
	LongWindow      int           `json:"long_window"`
	Tolerance       int           `json:"tolerance"`
	Headroom        int           `json:"headroom"`
	Remeasure       time.Duration `json:"remeasure_ns"`
	CriticalReserve int           `json:"critical_reserve"`
	DefaultReserve  int           `json:"default_reserve"`
	MaxWait         time.Duration `json:"max_wait_ns"`
	MaxQueue        int           `json:"max_queue"`
}

func (s sluiceSettings) config() overload.Config {
	return overload.Config{
		MinLimit: s.MinLimit, MaxLimit: s.MaxLimit, InitialLimit: s.InitialLimit,
		Window: s.Window, MinSamples: s.MinSamples, LongWindow: s.LongWindow,
		Tolerance: s.Tolerance, Headroom: s.Headroom, Remeasure: s.Remeasure,
		CriticalReserve: s.CriticalReserve, DefaultReserve: s.DefaultReserve,
		MaxWait: s.MaxWait, MaxQueue: s.MaxQueue,
	}
}

// sluiceLimit is sluice's overload.Limiter: an adaptive concurrency limit with a share
// reserved for critical requests, in which critical requests wait for a permit and
// sheddable ones never do. The bench's classes are overload's Critical and Sheddable.
func sluiceLimit(s sluiceSettings) (protection, error) {
	lim, err := overload.New(s.config())
	if err != nil {
		return nil, err
	}
	return &middleware{
		label: "sluice",
		wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, _ := overload.ParseCriticality(r.Header.Get(headerCriticality))
				p, err := lim.Acquire(r.Context(), c)
				var sh *overload.Shed
				switch {
				case errors.As(err, &sh) && sh.Reason != overload.ReasonCanceled:
					shed(w, "sluice", sh.RetryAfter)
					return
				case err != nil: // the client has gone
					return
				}
				next.ServeHTTP(w, r)
				p.Release()
			})
		},
		gauges: func() gauge {
			st := lim.Stats()
			return gauge{Limit: st.Limit, Inflight: st.InFlight, Queued: st.Queued}
		},
	}, nil
}
