// Package failover keeps rate limiting up when the store is slow, full or gone: a
// decorator around any [sluice.Limiter] (typically the Redis store) that bounds every
// decision by a deadline, stops calling a failing store with a circuit breaker, and
// decides by a failure mode while the store cannot. docs/failover.md explains how and why.
//
//	lim := failover.New(redis,
//		failover.WithDeadline(5*time.Millisecond), // the default
//		failover.WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 1.0 / 3}),
//		failover.WithLocalLimiter(memory.New()),
//	)
//	defer lim.Close()
//
// # Deadline and breaker
//
// Each decision waits at most the deadline ([DefaultDeadline]) for the store, whether or
// not the store honours its context; a call left running ends when the store returns
// ([WithMaxPending] bounds them, Close waits for them). [WithInlineCalls] calls a store
// that honours its context on the caller's goroutine. A caller whose own context ends
// first gets its context's error, not counted against the store. A [Breaker] opens on
// failures, then calls nothing for its OpenFor, then lets probes through (its doc has the
// rules and defaults); [WithStateChange] reports its changes, and [WithClock] gives it a
// clock other than time.Now.
//
// # Failure modes
//
// While the store fails or the breaker is open, each [sluice.Request]'s [sluice.Failure]
// decides, its zero fields taking [WithDefault]'s (FailOpen, share 1). A request of several
// limits fails as the strictest of its enforced limits says (closed, then local, then open);
// shadow limits never deny:
//
//	FailOpen    allow; Decision.Path is sluice.PathOpen, the counts are zero (unknown)
//	FailClosed  deny with an error wrapping sluice.ErrStoreUnavailable and the cause;
//	            Path is sluice.PathClosed; RetryAfter is Breaker.OpenFor. Front ends
//	            answer 503, not 429.
//	FailLocal   decide with the local limiter (WithLocalLimiter, typically a memory
//	            store) under the Failure's share of the limit: Rate and Burst times
//	            the share in parts per million, rounded down, at least 1 (package
//	            internal/share); all or nothing, like the store; Path is
//	            sluice.PathLocal and Decision.Limit the share. Without a local
//	            limiter, FailLocal fails closed.
//
// Bad input ([store.IsBadInput]) is returned as is, before anything else: it is never
// failed open and never touches the breaker.
//
// # What counts as a failure
//
// Stores classify their own errors ([sluice.StoreError], read with [sluice.KindOf]); every
// class that [store.IsFailure] names, and an error of no known class, is a
// failure, and so is a cancellation while the caller's context is live
// ([store.ForeignCancel]). This package adds the deadline ([store.KindTimeout]), the open
// breaker ([store.KindBreakerOpen]) and too many pending calls ([store.KindOverload]).
// An answer a layer below gave without asking the store (Report.StoreCalled false, as a
// deny cache's) is neither a success nor a failure to the breaker.
//
// # Reports and reservations
//
// Decide returns a [sluice.Report]: whether the store was called, its latency, the
// failure a mode absorbed and its kind, the Failure that decided and the breaker's state.
// Reserve asks the store through the breaker, without the decision deadline (its
// context's deadline is the longest wait); while the store fails it returns an error
// wrapping [sluice.ErrStoreUnavailable]: no failure mode makes up a reservation.
package failover
