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
// A breaker (sony/gobreaker) watches the store's answers; see Breaker for the rules and
// defaults: it opens after 5 consecutive failures or half of at least 20 calls in 10s
// failing, in either case only once failures have gone on for 50ms (a coalescing store
// fails a whole batch of decisions at one instant); stays open for 1s, calling nothing;
// then lets 3 probes through. Probes get a longer timeout than a decision, detached from
// the caller, so a reconnection that takes longer than a deadline still completes; only
// answers within the deadline count as successes. State reports the breaker's state for
// metrics and logs; WithStateChange reports its changes.
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
// missing scripts. Every class but bad input, sluice.ErrNotAtomic, sluice.ErrClosed and
// the caller's own cancellation is a failure (sluice.ErrorKind.IsFailure), and so is an
// error of no known class. This package adds its own: the deadline (KindTimeout), the
// open breaker (KindBreakerOpen) and too many pending calls (KindOverload). It knows no
// store's error codes.
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
// A denycache.Cache goes in front of the Limiter, not behind it: the breaker must judge
// the store by the store's own answers, and a cached denial is not one (behind the
// Limiter, a client hammering a denied key would feed the breaker a success per request,
// keeping it closed while the store is down, or closing it from half-open).
//
// # Measured behaviour under faults
//
// TestFaults runs 36 goroutines deciding continuously (a third in each mode, local share
// 1/2) through a failover.Limiter in front of a real redis-server, and hurts the server
// mid-run. Latency is per decision while the fault lasts; the path shares are of the
// decisions made while it lasts; "breaker opened" is from the start of the fault,
// "recovered" from its end until the breaker is closed again (bounded by OpenFor, 1s,
// plus three good probes, so it depends on where in its cycle the breaker was).
// Decision deadline 20ms (the tests share two cores with everything else; see
// faultDeadline), load average ~15 from other work on the machine:
//
//	go test ./failover -run 'TestFaults$' -count=1 -v
//
//	fault                      decisions  p50    p99     max    store  open  closed  local  breaker opened  recovered
//	SIGKILL, restart after 1.5s    18163  2 µs   255 µs  32 ms    0%    33%    33%    33%       94 ms         1.36 s
//	SIGSTOP 3s, SIGCONT            27988  1 µs    39 µs  42 ms    0%    34%    33%    33%       99 ms         141 ms
//	+50ms latency each way, 2s     19068  1 µs   215 µs  23 ms    0%    33%    33%    33%       95 ms         237 ms
//	connections cut, refused 1.5s  17096  1 µs   203 µs  37 ms    0%    33%    33%    33%       53 ms         581 ms
//	maxmemory 1mb noeviction, 1.5s 15880  2 µs   6.0 ms  26 ms    0%    33%    33%    33%       89 ms         411 ms
//	DEBUG SLEEP 2                  22465  1 µs    75 µs  87 ms    0%    34%    33%    33%       74 ms         1.00 s
//
// Once the breaker is open a decision costs microseconds; the p99 is the decisions that
// waited out the deadline before it opened, and a max above the deadline is the machine's
// scheduling (a busy two-core box), not the store: no decision waited for a fault to end.
// Under maxmemory only spending decisions fail (a denial writes nothing), so a few
// denials are still answered by the store until the breaker opens. Every
// decision during a fault followed its mode, and every decision after recovery was
// correct (TestFaults checks each one).
package failover
