// Package overload keeps a service serving when more requests arrive than it can take: an
// adaptive limit on the requests in flight, learned from their latency, and shedding by
// criticality, so that under overload Sheddable requests are refused first, then Default
// ones, and Critical requests keep a reserved share of the limit.
//
// It stands beside the rate limits: a rate limit protects a service from one client, this
// limit protects it from all of them at once. Most callers do
//
//	p, err := lim.Acquire(ctx, crit)
//	if err != nil { // a *Shed: answer 503 with its RetryAfter
//		...
//	}
//	serve()
//	p.Release() // or p.Drop() when the request never reached the service
//
// An event loop that cannot block a goroutine per request uses [Limiter.Enqueue], which
// decides the same way and hands the outcome to a callback.
//
// # Admission
//
// With L the limit (requests in flight) and the reserves of [Config], a request is
// admitted while fewer requests are in flight than its share:
//
//	Sheddable  ⌊L·(100 − CriticalReserve − DefaultReserve)/100⌋
//	Default    ⌊L·(100 − CriticalReserve)/100⌋
//	Critical   L
//
// so at any occupancy a Sheddable request is shed before a Default one, and a Default one
// before a Critical one, and no admission takes in flight above L (when L falls, the
// requests in flight finish). A Sheddable request beyond its share is shed at once; a
// Critical or Default one waits in a bounded queue for up to MaxWait (by default four
// times the long-term latency below). Waiters are admitted Critical first, then Default,
// each class in arrival order, whenever a permit ends or the limit rises; a new arrival
// never passes a waiter of its criticality or higher. The shares round down, so each
// reserve holds at least its percentage; with a small limit a share can be 0.
//
// # The limit
//
// The limit is Netflix's Gradient2 in integer arithmetic (nothing in it is floating point
// or random), with Envoy adaptive concurrency's periodic re-measurement of the latency
// without queueing. State: the limit in milli-permits (thousandths of a request), the
// long-term latency in ns, and the number n of windows averaged into it (counted up to
// 11). At the close of each window, with short the mean latency of the window's samples
// (ns, rounded toward zero, at least 1) and peak the most requests in flight during it:
//
//	n     = min(n+1, 11)
//	d     = min(n, LongWindow) for n ≤ 10, else LongWindow
//	long  = long + (short − long)/d                   the plain mean of the first 10 windows, then an EWMA
//	long  = long − long/20  if long > 2·short         decay after a spell of overload
//	grad  = clamp((100+Tolerance)·long·10/short, 500, 1000)    in thousandths
//	next  = limit·grad/1000 + headroom                Headroom·1000, or ⌊√(limit·1000)⌋ (√ of the limit, in milli)
//	next  = limit + (next − limit)/5                  smoothing: a fifth of the step
//	next  = min(next, limit)  if 2·peak < ⌊limit/1000⌋  no growth while the load uses under half
//	limit = clamp(next, MinLimit·1000, MaxLimit·1000)
//
// The limit admitted is ⌊limit/1000⌋. Every division rounds toward zero, so the limit
// moves in whole milli-permits and a step under 5 milli-permits is lost. The latency is
// the mean rather than a percentile: the mean moves with the queueing a limit causes,
// which is what the gradient measures, and it is steady on fewer samples than a tail.
//
// Under saturation that lasts many LongWindows the long-term latency follows the
// short-term one up, and the limit creeps upward; Remeasure (every minute by default)
// bounds that. When a re-measurement is due at a window's close, the limit is held at
// MinLimit for the next window, whose mean latency over the requests admitted in it
// becomes the long-term latency, which the EWMA then continues from (no new warm-up); the
// limit then returns to its value before, and the next re-measurement is due Remeasure
// later. The same re-measurement lets the limit return when the service itself has
// become slower or faster, which the long-term latency alone follows only over many
// LongWindows.
//
// Time: latencies are differences of the Clock's readings (monotonic with time.Now). A
// sample whose Release reads the clock earlier than its Acquire did (the clock stepped
// back) is dropped, as Drop does; a sample longer than 2^40 ns (about 18 minutes) counts
// as 2^40 ns. A window that opened later than now on the clock reopens at now, keeping
// its samples. A waiter's wait (MaxWait) runs on a timer and on the clock: it is shed at
// the first of its timer and an Acquire, Enqueue, Release or Drop that reads the clock
// its wait after it queued. A waiter of Enqueue has no timer.
//
// # Why not failsafe-go
//
// failsafe-go's adaptivelimiter is a careful implementation of the same idea, and
// bench/cmd/overload compares the two. It is not used here because it has no injectable
// clock (its tests would sleep), it takes a request's priority through a context value,
// it decides with floating point and randomness, and it keeps no reserved share of the
// limit for critical traffic.
package overload
