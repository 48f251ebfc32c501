package failover

import (
	"errors"

	"github.com/sluicehq/sluice"
)

// ErrBreakerOpen is the cause recorded for decisions made without calling the store
// because the circuit breaker is open (sluice.KindBreakerOpen).
var ErrBreakerOpen = errors.New("failover: circuit breaker open")

// ErrDeadline is the cause recorded for decisions whose store call did not answer within
// the deadline (sluice.KindTimeout).
var ErrDeadline = errors.New("failover: store deadline exceeded")

// ErrOverload is the cause recorded for decisions made without calling the store because
// too many calls are pending (see WithMaxPending; sluice.KindOverload).
var ErrOverload = errors.New("failover: too many pending store calls")

// ShareOf returns the limit the in-process limiter applies for limit under share: Rate
// and (when set) Burst multiplied by share and rounded down, but at least 1. Rounding
// down keeps N nodes, each with share 1/N, within the limit; the floor of 1 means a
// limit smaller than N can be exceeded, by at most N-Rate units per Period. A share
// outside (0, 1] returns limit unchanged.
func ShareOf(limit sluice.Limit, share float64) sluice.Limit {
	if !(share > 0 && share < 1) {
		return limit
	}
	scale := func(v int64) int64 {
		s := int64(float64(v) * share)
		if s < 1 {
			s = 1
		}
		if s > v {
			s = v
		}
		return s
	}
	limit.Rate = scale(limit.Rate)
	if limit.Burst > 0 {
		limit.Burst = scale(limit.Burst)
	}
	return limit
}
