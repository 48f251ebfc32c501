package failover

import (
	"errors"
)

// ErrBreakerOpen is the cause recorded for decisions made without calling the store
// because the circuit breaker is open (store.KindBreakerOpen).
var ErrBreakerOpen = errors.New("failover: circuit breaker open")

// ErrDeadline is the cause recorded for decisions whose store call did not answer within
// the deadline (store.KindTimeout).
var ErrDeadline = errors.New("failover: store deadline exceeded")

// ErrOverload is the cause recorded for decisions made without calling the store because
// too many calls are pending (see WithMaxPending; store.KindOverload).
var ErrOverload = errors.New("failover: too many pending store calls")
