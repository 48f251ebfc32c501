package failover

import (
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice"
)

func stateOf(s gobreaker.State) sluice.BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return sluice.BreakerHalfOpen
	case gobreaker.StateOpen:
		return sluice.BreakerOpen
	}
	return sluice.BreakerClosed
}

// Breaker configures the circuit breaker (sony/gobreaker). Zero fields take the defaults
// given with each field.
//
// While closed, the breaker counts the store calls of the last Window in rolling
// one-tenth buckets. It opens when ConsecutiveFailures calls in a row have failed, or when
// at least MinCalls calls were made in the Window and the share of failures among them
// reached FailureRatio; either way only once the failures have gone on for FailingFor
// (since the first of the streak, or the first in the Window).
//
// FailingFor matters because stores coalesce: the Redis store decides many concurrent
// decisions in one script call, so one slow call fails them all at the same instant. A
// burst of failures within a millisecond is one failure of the store, not many; failures
// that go on for FailingFor are an outage.
//
// While half-open, each probe is a real decision sent to the store with ProbeTimeout
// rather than the decision deadline, and detached from the caller's cancellation: the
// caller is still released at the deadline (its decision made by the failure mode), but
// the probe goes on, so that a store that needs longer than a deadline to come back (a
// new connection, a TLS handshake) is not kept out by the deadline itself. A probe
// counts as a success only if it answered within the deadline: a slower answer counts as
// a failure (a store that answers in 100ms is no use with a 5ms deadline), but the
// connection it made is there for the next probe. A probe that answers after its caller left has spent its
// units in the store on top of the fallback decision: at most Probes units per OpenFor. Open, it lets no call through for OpenFor, then turns half-open
// and lets Probes calls through: if they all succeed it closes (counts start afresh), and
// the first failure opens it again for another OpenFor. Recovery needs no restart.
//
// Only store failures count (see sluice.ErrorKind.IsFailure): bad input, a caller's own cancellation
// or deadline, and a closed limiter neither trip the breaker nor count as successes.
type Breaker struct {
	// ConsecutiveFailures opens the breaker after this many failed calls in a row
	// (default 5), once the first of them is FailingFor old.
	ConsecutiveFailures uint32
	// FailingFor is how long failures must have gone on to open the breaker (default
	// 50ms). A negative value means no minimum.
	FailingFor time.Duration
	// FailureRatio opens the breaker when this share of the calls in the Window failed
	// (default 0.5), once MinCalls calls were made in it. Values outside (0, 1] take the
	// default.
	FailureRatio float64
	// MinCalls is the number of calls in the Window before FailureRatio applies
	// (default 20).
	MinCalls uint32
	// Window is the span over which calls are counted for FailureRatio (default 10s).
	Window time.Duration
	// OpenFor is how long the breaker stays open before probing (default 1s). It is also
	// the RetryAfter of decisions denied in FailClosed mode.
	OpenFor time.Duration
	// Probes is how many calls go through while half-open; this many successes in a row
	// close the breaker (default 3).
	Probes uint32
	// ProbeTimeout bounds a probe's store call (default 1s); see above.
	ProbeTimeout time.Duration
}

func (b Breaker) withDefaults() Breaker {
	if b.ConsecutiveFailures == 0 {
		b.ConsecutiveFailures = 5
	}
	if b.FailingFor == 0 {
		b.FailingFor = 50 * time.Millisecond
	}
	if !(b.FailureRatio > 0 && b.FailureRatio <= 1) {
		b.FailureRatio = 0.5
	}
	if b.MinCalls == 0 {
		b.MinCalls = 20
	}
	if b.Window <= 0 {
		b.Window = 10 * time.Second
	}
	if b.OpenFor <= 0 {
		b.OpenFor = time.Second
	}
	if b.Probes == 0 {
		b.Probes = 3
	}
	if b.ProbeTimeout <= 0 {
		b.ProbeTimeout = time.Second
	}
	return b
}

// settings returns the gobreaker settings for b (with defaults applied).
func (b Breaker) settings(name string, onChange func(from, to sluice.BreakerState)) gobreaker.Settings {
	bucket := b.Window / 10
	if bucket <= 0 {
		bucket = b.Window
	}
	// ReadyToTrip runs under the breaker's lock, on every failure while closed, with the
	// counts already updated: the first failure of a streak (of the window) starts it.
	var streakStart, windowStart time.Time
	st := gobreaker.Settings{
		Name:         name,
		MaxRequests:  b.Probes,
		Interval:     b.Window,
		BucketPeriod: bucket,
		Timeout:      b.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			now := time.Now()
			if c.ConsecutiveFailures <= 1 {
				streakStart = now
			}
			if c.TotalFailures <= 1 {
				windowStart = now
			}
			if c.ConsecutiveFailures >= b.ConsecutiveFailures && now.Sub(streakStart) >= b.FailingFor {
				return true
			}
			return c.Requests >= b.MinCalls && float64(c.TotalFailures) >= b.FailureRatio*float64(c.Requests) &&
				now.Sub(windowStart) >= b.FailingFor
		},
		// The limiter reports only store failures as errors and excluded outcomes as
		// errExcluded; everything else counts as a success.
		IsExcluded: func(err error) bool { return err == errExcluded },
	}
	if onChange != nil {
		st.OnStateChange = func(_ string, from, to gobreaker.State) { onChange(stateOf(from), stateOf(to)) }
	}
	return st
}

// errExcluded is reported to the breaker for outcomes that say nothing about the store's
// health (bad input, the caller's own cancellation).
var errExcluded = fmt.Errorf("failover: excluded from breaker counts")
