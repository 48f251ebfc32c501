package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/share"
	"github.com/sluicehq/sluice/store"
)

// DefaultDeadline is how long a decision waits for the store unless WithDeadline says
// otherwise.
const DefaultDeadline = 5 * time.Millisecond

// DefaultMaxPending is the default of WithMaxPending.
const DefaultMaxPending = 1024

// Limiter is a sluice.Limiter that decides with a primary store and, when the store
// fails, by the failure mode of the request's limits. Reset, Release and Settle call the
// store within the deadline, through the breaker, and return a store failure as an error
// wrapping sluice.ErrStoreUnavailable. It is safe for concurrent use. Create it with New.
type Limiter struct {
	primary    sluice.Limiter
	local      sluice.Limiter
	deadline   time.Duration
	breakerCfg Breaker
	cb         *breaker
	def        sluice.Failure
	maxPending int64
	onChange   func(from, to sluice.BreakerState)
	clock      func() time.Time // the breaker's clock

	inline bool
	shared *sharedDeadlines // the deadlines of inline decisions

	closed  atomic.Bool
	pending atomic.Int64  // store calls running, including those whose callers left
	drained chan struct{} // closed when pending falls to 0 once closed is set
	drain   sync.Once     // closes drained
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithDeadline sets the longest a decision waits for the store (default DefaultDeadline,
// 5ms). A non-positive d takes the default.
func WithDeadline(d time.Duration) Option {
	return func(l *Limiter) { l.deadline = cmp.Or(max(d, 0), l.deadline) }
}

// WithBreaker configures the circuit breaker; zero fields take their defaults.
func WithBreaker(b Breaker) Option { return func(l *Limiter) { l.breakerCfg = b } }

// WithClock makes the circuit breaker read now from clock instead of time.Now: its
// FailingFor, Window and OpenFor pass on that clock (tests, simulation). Deadlines and
// ProbeTimeout bound real store calls and stay on the real clock.
func WithClock(clock func() time.Time) Option { return func(l *Limiter) { l.clock = clock } }

// WithDefault sets the Failure of limits whose request leaves fields of theirs zero
// (default: FailOpen, share 1); zero fields of f keep the defaults.
func WithDefault(f sluice.Failure) Option {
	return func(l *Limiter) { l.def = f.Or(l.def) }
}

// WithMaxPending bounds the store calls running at once, including those still running
// after their caller was released at the deadline. While n are running, decisions use
// the failure mode without calling the store (store.KindOverload). A non-positive n
// takes DefaultMaxPending.
func WithMaxPending(n int) Option {
	return func(l *Limiter) { l.maxPending = cmp.Or(int64(max(n, 0)), l.maxPending) }
}

// WithInlineCalls calls the store on the caller's goroutine, with the deadline in its
// context, instead of on a goroutine of its own. The decision then returns only when the
// store gives up: use it only with a store that returns promptly when its context ends,
// as the memory and Redis stores of this module do. Half-open probes still run on their
// own goroutine. An inline decision waits at least 15/16 of the deadline and never more;
// a caller whose context is cancelled before its deadline while the store is deciding is
// released when the store answers or at the deadline.
func WithInlineCalls() Option { return func(l *Limiter) { l.inline = true } }

// WithStateChange calls f on every breaker state change, for logs. It runs while the
// breaker holds its lock: it must be quick and must not call the Limiter.
func WithStateChange(f func(from, to sluice.BreakerState)) Option {
	return func(l *Limiter) { l.onChange = f }
}

// WithLocalLimiter sets the in-process limiter that decides in FailLocal mode, typically
// a memory store; the caller keeps owning it. Without one, FailLocal fails closed.
func WithLocalLimiter(local sluice.Limiter) Option {
	return func(l *Limiter) { l.local = local }
}

// New returns a Limiter deciding with primary, which the caller keeps owning (Close does
// not close it).
func New(primary sluice.Limiter, opts ...Option) *Limiter {
	l := &Limiter{
		primary:    primary,
		deadline:   DefaultDeadline,
		def:        sluice.Failure{Mode: sluice.FailOpen, Share: 1},
		maxPending: DefaultMaxPending,
		clock:      time.Now,
		drained:    make(chan struct{}),
	}
	for _, o := range opts {
		o(l)
	}
	l.breakerCfg = l.breakerCfg.withDefaults()
	if l.inline {
		l.shared = newSharedDeadlines(l.deadline)
	}
	l.cb = newBreaker(l.breakerCfg, l.clock, l.onChange)
	return l
}

// State returns the circuit breaker's state now. An open breaker whose OpenFor has passed
// reports half-open.
func (l *Limiter) State() sluice.BreakerState { return l.cb.state(l.cb.now()) }

// Deadline returns the longest a decision waits for the store.
func (l *Limiter) Deadline() time.Duration { return l.deadline }

// Close stops deciding (later calls return an error wrapping sluice.ErrClosed) and waits
// for store calls still running. It closes neither the primary nor the local limiter.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	// enter counts a call before it reads closed, and this reads the count after
	// setting closed: a call either sees closed or is waited for.
	if l.pending.Load() > 0 {
		<-l.drained
	}
	return nil
}

// Decide implements sluice.Limiter as the package doc says. A caller whose own context
// ends first gets its context's error.
func (l *Limiter) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if err := store.CheckRequests(reqs, ds); err != nil {
		return sluice.Report{Kind: store.KindBadInput}, err
	}
	if len(reqs) == 0 {
		return sluice.Report{}, nil
	}
	a := call(l, ctx, true, decideArgs{l.primary, reqs, ds}, decide)
	if !a.failed && a.err == nil && len(a.v.ds) > 0 && &a.v.ds[0] != &ds[0] {
		copy(ds, a.v.ds) // decided on a goroutine of its own, into its own slice
	}
	rep := a.v.rep // what the layers below learned
	switch {
	case !a.called:
		rep.StoreCalled = false
	case a.failed || a.err != nil:
		rep.StoreCalled, rep.StoreLatency = true, a.latency
	case rep.StoreCalled && rep.StoreLatency == 0:
		rep.StoreLatency = a.latency
	}
	rep.Breaker, rep.Kind = l.state(), sluice.KindOf(a.err)
	if !a.failed {
		return rep, a.err
	}
	rep.Failure, rep.Fallback = a.err, l.fallback(reqs)
	switch rep.Fallback.Mode {
	case sluice.FailClosed:
		for i := range reqs {
			ds[i] = sluice.Decision{Limit: reqs[i].Limit, RetryAfter: l.breakerCfg.OpenFor, Path: sluice.PathClosed}
		}
		return rep, unavailable(a.err)
	case sluice.FailLocal:
		return rep, l.decideLocal(ctx, reqs, ds)
	}
	for i := range reqs {
		ds[i] = sluice.Decision{Allowed: true, Limit: reqs[i].Limit, Path: sluice.PathOpen}
	}
	return rep, nil
}

// AllowN is Decide of one request with the limiter's default Failure.
func (l *Limiter) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	return sluice.AllowN(ctx, l, key, limit, n)
}

// fallback resolves the failure mode of a request whose store failed: the strictest mode
// among its enforced limits' Failures, each completed by the defaults, and the share of
// the first limit with that mode. A request of shadow limits alone fails open.
func (l *Limiter) fallback(reqs []sluice.Request) sluice.Failure {
	out := sluice.Failure{Mode: sluice.FailOpen, Share: l.def.Share}
	for i := range reqs {
		if reqs[i].Shadow {
			continue
		}
		f := reqs[i].Failure.Or(l.def)
		if slices.Index(byStrictness, f.Mode) > slices.Index(byStrictness, out.Mode) {
			out = f
		}
	}
	if out.Mode == sluice.FailLocal && l.local == nil {
		// Asked to keep limiting, with nothing to limit with: the strict reading.
		out.Mode = sluice.FailClosed
	}
	return out
}

// byStrictness lists the failure modes from the least strict.
var byStrictness = []sluice.FailureMode{sluice.FailOpen, sluice.FailLocal, sluice.FailClosed}

// decideLocal decides reqs on the local limiter, all or nothing, each under its share of
// its limit; a cost that can never fit its share denies the request without spending.
func (l *Limiter) decideLocal(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) error {
	shared := make([]sluice.Request, len(reqs))
	tooBig := false
	for i, r := range reqs {
		shared[i] = r
		shared[i].Limit = shareOf(r.Limit, r.Failure.Or(l.def).Share)
		if r.N > shared[i].Limit.MaxCost() {
			tooBig = true
		}
	}
	if tooBig {
		// Look at every share, spending nothing; the store may admit the cost once back.
		for i := range shared {
			shared[i].N = 0
		}
	}
	if _, err := l.local.Decide(ctx, shared, ds); err != nil {
		return err
	}
	for i := range shared {
		ds[i].Path = sluice.PathLocal
		if tooBig {
			ds[i].Allowed, ds[i].RetryAfter = false, 0
			if reqs[i].N > shared[i].Limit.MaxCost() {
				ds[i].RetryAfter = l.breakerCfg.OpenFor
			}
		}
	}
	return nil
}

// Reserve implements sluice.Limiter. A reservation is asked of the store through the
// breaker, but without the decision deadline (the deadline of ctx is its longest wait).
// When the breaker is open or the store fails, the error wraps sluice.ErrStoreUnavailable.
func (l *Limiter) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	if err := store.CheckRequest(key, limit, n); err != nil {
		return sluice.Reservation{}, err
	}
	t, _, err := l.enter()
	if err != nil {
		if store.IsFailure(sluice.KindOf(err)) {
			err = unavailable(err)
		}
		return sluice.Reservation{}, err
	}
	res, err := l.primary.Reserve(ctx, key, limit, n)
	l.leave()
	brk, failed := judge(ctx, &struct{}{}, err)
	l.cb.done(t, brk, l.cb.now())
	if failed {
		return sluice.Reservation{}, unavailable(brk)
	}
	return res, err
}

// Reset implements sluice.Limiter: it resets key's state in the store and in the local
// limiter.
func (l *Limiter) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := store.CheckRequest(key, limit, 0); err != nil {
		return err
	}
	a := call(l, ctx, false, struct{}{}, func(ctx context.Context, _ struct{}) (struct{}, error) {
		return struct{}{}, l.primary.Reset(ctx, key, limit)
	})
	if l.local != nil {
		// Any share is possible; the default one is the likeliest.
		_ = l.local.Reset(ctx, key, shareOf(limit, l.def.Share))
		if l.def.Share != 1 {
			_ = l.local.Reset(ctx, key, limit)
		}
	}
	if a.failed {
		return unavailable(a.err)
	}
	return a.err
}

// Release implements sluice.Limiter: it releases the lease in the store and, when the
// store did not hold it, in the local limiter, which took it if a FailLocal decision did
// (under the default share).
func (l *Limiter) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	if err := store.CheckRelease(key, limit, lease); err != nil {
		return false, err
	}
	a := call(l, ctx, false, struct{}{}, func(ctx context.Context, _ struct{}) (bool, error) {
		return l.primary.Release(ctx, key, limit, lease)
	})
	if !a.v && l.local != nil {
		if held, _ := l.local.Release(ctx, key, shareOf(limit, l.def.Share), lease); held {
			return true, nil
		}
	}
	if a.failed {
		return false, unavailable(a.err)
	}
	return a.v, a.err
}

// Settle implements sluice.Limiter: it settles in the store and, when the store holds no
// such reservation, in the local limiter, which made it if a FailLocal decision did
// (under the default share).
func (l *Limiter) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := store.CheckSettle(key, limit, reservation, cost); err != nil {
		return sluice.Decision{}, err
	}
	a := call(l, ctx, false, struct{}{}, func(ctx context.Context, _ struct{}) (sluice.Decision, error) {
		return l.primary.Settle(ctx, key, limit, reservation, cost)
	})
	if l.local != nil && (a.failed || errors.Is(a.err, sluice.ErrUnknownReservation)) {
		d, err := l.local.Settle(ctx, key, shareOf(limit, l.def.Share), reservation, cost)
		switch {
		case err == nil:
			d.Path = sluice.PathLocal
			return d, nil
		case !errors.Is(err, sluice.ErrUnknownReservation):
			return sluice.Decision{}, err // the local limiter's, settled already
		}
	}
	if a.failed {
		return sluice.Decision{}, unavailable(a.err)
	}
	return a.v, a.err
}

func unavailable(cause error) error {
	return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, cause)
}

// state is the breaker's state as of its last change.
func (l *Limiter) state() sluice.BreakerState { return l.cb.cur.Load().state }

// attempt is the outcome of one store call made through the breaker and the deadline.
type attempt[T any] struct {
	v   T
	err error
	// failed reports that err is a store failure: the failure mode decides.
	failed bool
	// called reports whether the store was called, and latency how long it was waited for.
	called  bool
	latency time.Duration
}

// call runs f, the store call, through the breaker and within the deadline. The attempt
// carries f's result and failed == false when the store answered (successfully, or with
// an error that is not a store failure), and the cause with failed == true when the
// failure mode must decide.
//
// f runs in its own goroutine (at most maxPending at once), so that the caller is
// released at the deadline even if the store ignores its context; a half-open breaker's
// probe runs with ProbeTimeout, detached from the caller (see Breaker). With
// WithInlineCalls, f runs on the caller's goroutine; a decision's context is then a
// shared deadline (see sharedDeadlines). f gets its arguments as a, so that a decision
// allocates no closure.
func call[A, T any](l *Limiter, ctx context.Context, decision bool, a A, f func(context.Context, A) (T, error)) attempt[T] {
	t, probe, err := l.enter()
	if err != nil {
		return attempt[T]{err: err, failed: store.IsFailure(sluice.KindOf(err))}
	}
	start := time.Now()
	if l.inline && !probe {
		var v T
		if decision {
			v, err = f(l.shared.context(ctx, start), a)
		} else {
			cctx, cancel := context.WithTimeout(ctx, l.deadline)
			v, err = f(cctx, a)
			cancel()
		}
		l.leave()
		latency := time.Since(start)
		brk, failed := judge(ctx, &v, err)
		l.cb.done(t, brk, l.cb.now())
		if failed {
			err = brk
			if errors.Is(err, context.DeadlineExceeded) {
				err = deadlineError(l.deadline, err)
			}
		}
		return attempt[T]{v: v, err: err, failed: failed, called: true, latency: latency}
	}
	if d, ok := any(a).(detacher[A]); ok {
		// The call may outlive the caller's Decide (it is released at the deadline), so
		// it must not share the caller's slices.
		a = d.detach()
	}
	return callAsync(l, ctx, probe, start, t, a, f)
}

// detacher is implemented by call arguments that a call on a goroutine of its own must
// copy first.
type detacher[A any] interface{ detach() A }

// decideArgs are the arguments of a decision's store call (call's a).
type decideArgs struct {
	store sluice.Limiter
	reqs  []sluice.Request
	ds    []sluice.Decision
}

// decided is a decision call's result: its report and the slice it wrote decisions to.
type decided struct {
	rep sluice.Report
	ds  []sluice.Decision
}

func decide(ctx context.Context, a decideArgs) (decided, error) {
	rep, err := a.store.Decide(ctx, a.reqs, a.ds)
	return decided{rep, a.ds}, err
}

func (a decideArgs) detach() decideArgs {
	return decideArgs{a.store, slices.Clone(a.reqs), make([]sluice.Decision, len(a.reqs))}
}

// The classified causes of decisions made without an answer from the store.
var (
	errBreakerOpen = &sluice.StoreError{Kind: store.KindBreakerOpen, Err: ErrBreakerOpen}
	errOverload    = &sluice.StoreError{Kind: store.KindOverload, Err: ErrOverload}
)

func deadlineError(d time.Duration, cause error) error {
	err := fmt.Errorf("%w (%v)", ErrDeadline, d)
	if cause != nil {
		err = fmt.Errorf("%w (%v): %w", ErrDeadline, d, cause)
	}
	return &sluice.StoreError{Kind: store.KindTimeout, Err: err}
}

// enter lets a store call through the breaker, the pending bound and Close, or returns
// the call's outcome as err. A caller let through calls the store, then the breaker's
// done and leave. probe reports a half-open breaker's probe.
func (l *Limiter) enter() (t ticket, probe bool, err error) {
	if l.closed.Load() {
		return ticket{}, false, fmt.Errorf("failover: %w", sluice.ErrClosed)
	}
	t, probe, berr := l.cb.allow()
	if berr != nil {
		return ticket{}, false, fmt.Errorf("%w: %w", errBreakerOpen, berr)
	}
	if l.pending.Add(1) > l.maxPending {
		l.leave()
		l.cb.done(t, errOverload, l.cb.now())
		return ticket{}, false, errOverload
	}
	if l.closed.Load() { // read after counting the call (see Close)
		l.leave()
		l.cb.done(t, errExcluded, l.cb.now())
		return ticket{}, false, fmt.Errorf("failover: %w", sluice.ErrClosed)
	}
	return t, probe, nil
}

// leave uncounts a call that enter counted, letting Close return after the last one.
func (l *Limiter) leave() {
	if l.pending.Add(-1) == 0 && l.closed.Load() {
		l.drain.Do(func() { close(l.drained) })
	}
}

// callAsync runs f, let through by enter, in a goroutine of its own (see call).
func callAsync[A, T any](l *Limiter, ctx context.Context, probe bool, start time.Time, t ticket, a A, f func(context.Context, A) (T, error)) attempt[T] {
	var cctx context.Context
	var cancel context.CancelFunc
	var expired <-chan struct{} // closed at the deadline
	if probe {
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.breakerCfg.ProbeTimeout)
		timer, stop := context.WithTimeout(context.Background(), l.deadline)
		defer stop()
		expired = timer.Done()
	} else {
		cctx, cancel = context.WithTimeout(ctx, l.deadline)
		expired = cctx.Done() // also closed when ctx ends; giveUp tells which
	}
	ch := make(chan attempt[T], 1)
	go func() {
		defer l.leave()
		defer cancel()
		v, err := f(cctx, a)
		if probe {
			// The probe's outcome is the store's, whenever it comes and whoever waits;
			// but only an answer within the deadline shows the store can serve again.
			brk, _ := judge(context.Background(), &v, err)
			if brk == nil && time.Since(start) > l.deadline {
				brk = ErrDeadline
			}
			l.cb.done(t, brk, l.cb.now())
		}
		ch <- attempt[T]{v: v, err: err} // buffered: never blocks, even when the caller has left
	}()

	var r attempt[T]
	select {
	case r = <-ch:
	case <-expired:
		r = giveUp(l, ctx, ch, start, probe, t)
	case <-ctx.Done():
		r = giveUp(l, ctx, ch, start, probe, t)
	}
	if r.called {
		return r // given up
	}
	out := attempt[T]{v: r.v, err: r.err, called: true, latency: time.Since(start)}
	var brk error
	if brk, out.failed = judge(ctx, &r.v, r.err); out.failed {
		out.err = brk
	}
	if !probe {
		l.cb.done(t, brk, l.cb.now())
	}
	return out
}

// giveUp releases a caller whose deadline passed or whose own context ended before the
// store answered, with an attempt that is called; if the answer has arrived meanwhile,
// it returns that answer (not called) instead.
func giveUp[T any](l *Limiter, ctx context.Context, ch chan attempt[T], start time.Time, probe bool, t ticket) attempt[T] {
	select {
	case r := <-ch:
		return r
	default:
	}
	out := attempt[T]{called: true, latency: time.Since(start)}
	if cerr := ctx.Err(); cerr != nil {
		// The caller's own context ended: nothing to say about the store.
		if !probe {
			l.cb.done(t, errExcluded, l.cb.now())
		}
		out.err = fmt.Errorf("failover: %w", cerr)
		return out
	}
	if !probe {
		l.cb.done(t, ErrDeadline, l.cb.now())
	}
	out.err, out.failed = deadlineError(l.deadline, nil), true
	return out
}

// judge returns what the breaker is told about a store call that answered v and err, and
// whether err is a store failure; when it is, brk is the failure, which the failure mode
// records. ctx is the caller's: an error of its own cancellation or deadline, and a
// decision answered without asking the store, say nothing about the store; a
// cancellation while ctx is live is a store failure (store.ForeignCancel).
func judge[T any](ctx context.Context, v *T, err error) (brk error, failed bool) {
	switch {
	case err == nil:
		if d, ok := any(v).(*decided); ok && !d.rep.StoreCalled {
			return errExcluded, false
		}
		return nil, false
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return errExcluded, false
	}
	if err = store.ForeignCancel(ctx, err); store.IsFailure(sluice.KindOf(err)) {
		return err, true
	}
	return errExcluded, false
}

// shareOf is the limit the local limiter applies for limit under a Failure's share.
func shareOf(limit sluice.Limit, fraction float64) sluice.Limit {
	return share.Limit(limit, share.FromFraction(fraction))
}
