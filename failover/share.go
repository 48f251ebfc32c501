package failover

import "errors"

// The causes recorded for decisions the failure mode made: the breaker was open
// (store.KindBreakerOpen), the store did not answer within the deadline
// (store.KindTimeout), or too many calls were pending (see WithMaxPending;
// store.KindOverload).
var (
	ErrBreakerOpen = errors.New("failover: circuit breaker open")
	ErrDeadline    = errors.New("failover: store deadline exceeded")
	ErrOverload    = errors.New("failover: too many pending store calls")
)
