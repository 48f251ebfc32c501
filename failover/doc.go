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
// Each decision waits at most the deadline ([DefaultDeadline]) for the store, whether or
// not the store honours its context. While the store fails, each [sluice.Request]'s
// [sluice.Failure] decides, its zero fields taking [WithDefault]'s (FailOpen, share 1); a
// request of several limits fails as the strictest of its enforced limits says (closed,
// then local, then open), and shadow limits never deny. FailOpen allows (Path
// sluice.PathOpen, zero counts); FailClosed denies with an error wrapping
// sluice.ErrStoreUnavailable (Path sluice.PathClosed); FailLocal decides with
// [WithLocalLimiter]'s limiter under the share of the limit (Path sluice.PathLocal), and
// fails closed without one.
//
// Bad input ([store.IsBadInput]) is returned as is: never failed open, never counted by
// the breaker. Every class [store.IsFailure] names, an error of no known class and a
// foreign cancellation ([store.ForeignCancel]) are failures; an answer given without
// asking the store (Report.StoreCalled false) is neither success nor failure.
package failover
