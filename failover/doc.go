// Package failover keeps rate limiting up when the store is slow, full or gone: a
// decorator around any sluice.Limiter (typically the Redis store) that bounds every
// decision by a deadline, stops calling a failing store with a circuit breaker, and
// decides by a failure mode while the store cannot.
//
//	lim := failover.New(redis,
//		failover.WithDeadline(5*time.Millisecond), // the default
//		failover.WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 1.0 / 3}), // three nodes share this Redis
//		failover.WithLocalLimiter(memory.New()),
//	)
//	defer lim.Close()
//	rep, err := lim.Decide(ctx, []sluice.Request{{Key: key, Limit: limit, N: 1,
//		Failure: sluice.Failure{Mode: sluice.FailClosed}}}, ds) // per limit
//
// # The deadline
//
// Each decision waits at most the deadline (DefaultDeadline, 5ms) for the store. The
// store is called in a goroutine of its own with a context carrying the deadline, and the
// caller is released when the deadline passes whether or not the store honours its
// context (a client blocked on a frozen server, a dial that ignores cancellation). A call
// left running ends when the store returns; WithMaxPending bounds how many may run at
// once, and Close waits for them. A caller whose own context ends first gets its
// context's error, which is not counted against the store.
//
// The goroutine and its two scheduler hand-offs cost a few microseconds per decision
// (BenchmarkOverhead). A store known to return when its context ends, as the memory and
// Redis stores of this module do, can be called on the caller's goroutine instead with
// WithInlineCalls; TestFaultsInline holds the Redis store to the same deadlines. Inline
// decisions that start close together share one timer (see WithInlineCalls), which
// saves a context.WithTimeout per decision.
//
// # The circuit breaker
//
// A breaker watches the store's answers; see Breaker for the rules and
// defaults: it opens after 5 consecutive failures or half of at least 20 calls in 10s
// failing, in either case only once failures have gone on for 50ms (a coalescing store
// fails a whole batch of decisions at one instant); stays open for 1s, calling nothing;
// then lets 3 probes through. Probes get a longer timeout than a decision, detached from
// the caller, so a reconnection that takes longer than a deadline still completes; only
// answers within the deadline count as successes. State reports the breaker's state for
// metrics and logs; WithStateChange reports its changes.
//
// The breaker is this package's own rather than a library's: it sits on every decision,
// and while closed it lets a call through with one atomic load and counts its success
// with one compare-and-swap, where a general-purpose breaker takes a lock twice and
// allocates a closure per call.
//
// # Failure modes
//
// When the store fails or the breaker is open, the request's limits say how it is decided:
// each sluice.Request carries a sluice.Failure, whose zero fields take the limiter's
// defaults (WithDefault: FailOpen and share 1 unless set). A request of several limits
// fails as the strictest of its enforced limits says (closed, then local, then open);
// shadow limits never deny (a request of shadow limits alone fails open):
//
//	FailOpen    allow; Decision.Path is sluice.PathOpen, the counts are zero (unknown)
//	FailClosed  deny with an error wrapping sluice.ErrStoreUnavailable and the cause;
//	            Path is sluice.PathClosed; RetryAfter is Breaker.OpenFor. Front ends
//	            answer 503, not 429.
//	FailLocal   decide with the local limiter (WithLocalLimiter, typically a memory
//	            store) under ShareOf(limit, share): Rate and Burst times the share,
//	            rounded down, at least 1; all or nothing, like the store; Path is
//	            sluice.PathLocal and Decision.Limit the share. With share 1/N for N
//	            nodes, the fleet stays within the limit while the store is away. Local
//	            state is separate from the store's: spending in one is not seen by the
//	            other. Without a local limiter, FailLocal fails closed.
//
// Bad input (sluice.IsBadInput) is checked before anything else and returned as is: it
// is never failed open and never touches the breaker.
//
// # What counts as a store failure
//
// Stores classify their own errors (sluice.StoreError, read with sluice.KindOf): the
// Redis store sorts Redis replies and network errors into timeouts, refused and reset
// connections, busy, out of memory, loading, read-only, cluster down, redirections and
// missing scripts. Every class but bad input, sluice.ErrClosed and
// the caller's own cancellation is a failure (sluice.ErrorKind.IsFailure), and so is an
// error of no known class. A cancellation while the caller's context is live is not the
// caller's (another call that shared the store's work gave up): it is a failure too
// (sluice.ForeignCancel), and the caller never sees context.Canceled. This package adds
// its own: the deadline (KindTimeout), the open breaker (KindBreakerOpen) and too many
// pending calls (KindOverload). It knows no store's error codes.
//
// # Reports
//
// Decide returns a sluice.Report with what happened: whether the store was called, its
// latency, the failure a mode absorbed and its kind, the Failure that decided and the
// breaker's state. Package observe logs and counts them.
//
// # Reservations
//
// Reserve asks the store through the breaker, without the decision deadline: the
// deadline of its context is the reservation's longest wait. While the store fails it
// returns an error wrapping sluice.ErrStoreUnavailable; no failure mode makes up a
// reservation.
//
// # With a deny cache
//
// A denycache.Cache below the Limiter (package stack's order) is judged by its Reports:
// an answer it gave without asking the store (Report.StoreCalled false) is neither a
// success nor a failure to the breaker, which judges the store by the store's own
// answers alone. A layer below that does not report so would keep the breaker closed
// with its answers while the store is down.
//
// # Under faults
//
// TestFaults hurts a real redis-server under load (SIGKILL, SIGSTOP, added latency, cut
// connections, maxmemory, DEBUG SLEEP) and checks that every decision during the fault
// follows its mode within the deadline plus scheduling slack (not counting the time the
// test process itself was stopped by a busy machine), and that every decision
// after recovery is the store's; bench/README.md has its figures.
package failover
