package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// DefaultDeadline is how long a decision waits for the store unless WithDeadline says
// otherwise.
const DefaultDeadline = 5 * time.Millisecond

// DefaultMaxPending is the default of WithMaxPending.
const DefaultMaxPending = 1024

// Limiter is a sluice.Limiter and sluice.MultiLimiter that decides with a primary store
// and, when the store fails, with the failure mode of the decision's Fallback. It is safe
// for concurrent use. Create it with New.
type Limiter struct {
	primary    sluice.Limiter
	deadline   time.Duration
	breakerCfg Breaker
	cb         *gobreaker.TwoStepCircuitBreaker[struct{}]
	def        Fallback
	fbFunc     func(ctx context.Context, key string, limit sluice.Limit) Fallback
	maxPending int64
	onChange   func(from, to BreakerState)
	state      atomic.Uint32 // the breaker's state as of its last change (BreakerState)

	inline bool
	shared *sharedDeadlines // the deadlines of inline decisions

	localOnce sync.Once
	local     sluice.Limiter
	ownLocal  bool
	localMade atomic.Bool

	closeMu sync.RWMutex // held for reading while a call registers with calls
	closed  atomic.Bool
	pending atomic.Int64   // store calls running, including those whose callers left
	calls   sync.WaitGroup // the same, for Close
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithDeadline sets the longest a decision waits for the store (default DefaultDeadline,
// 5ms). A non-positive d takes the default.
func WithDeadline(d time.Duration) Option {
	return func(l *Limiter) {
		if d > 0 {
			l.deadline = d
		}
	}
}

// WithBreaker configures the circuit breaker; zero fields take their defaults.
func WithBreaker(b Breaker) Option { return func(l *Limiter) { l.breakerCfg = b } }

// WithDefaultMode sets the mode of decisions whose context and WithFallbackFunc choose
// none (default FailOpen). Unset keeps the default.
func WithDefaultMode(m Mode) Option {
	return func(l *Limiter) {
		if m != Unset && m <= FailLocal {
			l.def.Mode = m
		}
	}
}

// WithLocalShare sets the share of each limit the in-process limiter gets in FailLocal
// mode when the context and WithFallbackFunc choose none (default 1: the whole limit,
// right for a single node). Use 1/N for N nodes sharing the store. A share outside
// (0, 1] keeps the default.
func WithLocalShare(share float64) Option {
	return func(l *Limiter) {
		if share > 0 && share <= 1 {
			l.def.Share = share
		}
	}
}

// WithFallbackFunc sets a function choosing the Fallback of each decision from its
// context, key and limit, for example from a per-policy table. Fields it leaves zero take
// the defaults; a Fallback carried by the context (WithFallback) takes precedence. It is
// called only when the store fails, and must be safe for concurrent use.
func WithFallbackFunc(f func(ctx context.Context, key string, limit sluice.Limit) Fallback) Option {
	return func(l *Limiter) { l.fbFunc = f }
}

// WithMaxPending bounds the store calls running at once, including those still running
// after their caller was released at the deadline (a store that ignores its context, a
// frozen server). While n are running, decisions use the failure mode without calling
// the store (Kind KindOverload), so goroutines never pile up. A healthy store answers in
// well under a millisecond, so the bound is reached only when calls hang. Default
// DefaultMaxPending; a non-positive n takes the default.
func WithMaxPending(n int) Option {
	return func(l *Limiter) {
		if n > 0 {
			l.maxPending = int64(n)
		}
	}
}

// WithInlineCalls calls the store on the caller's goroutine, with the deadline in its
// context, instead of on a goroutine of its own. It saves a goroutine and two scheduler
// hand-offs per decision, but the decision then returns only when the store gives up:
// use it only with a store that returns promptly when its context ends, as the memory
// and Redis stores of this module do. Half-open probes still run on their own goroutine.
//
// Inline decisions (AllowN, AllowMulti; not Reset) that start within 1/16 of the deadline
// of one another share one timer instead of a context.WithTimeout each: each waits at
// least 15/16 of the deadline and never more than the deadline. A caller whose own
// deadline comes first keeps it; a caller whose context is cancelled before its deadline
// while the store is deciding is released when the store answers or at the deadline.
func WithInlineCalls() Option { return func(l *Limiter) { l.inline = true } }

// WithStateChange calls f on every breaker state change, for logs. It runs while the
// breaker holds its lock: it must be quick and must not call the Limiter.
func WithStateChange(f func(from, to BreakerState)) Option {
	return func(l *Limiter) { l.onChange = f }
}

// WithLocalLimiter sets the limiter used in FailLocal mode (default: a memory store made on
// first use, holding at most a million keys, closed by Close). The caller keeps owning
// the limiter given here.
func WithLocalLimiter(local sluice.Limiter) Option {
	return func(l *Limiter) { l.local = local }
}

// New returns a Limiter deciding with primary, which the caller keeps owning (Close does
// not close it).
func New(primary sluice.Limiter, opts ...Option) *Limiter {
	l := &Limiter{
		primary:    primary,
		deadline:   DefaultDeadline,
		def:        Fallback{Mode: FailOpen, Share: 1},
		maxPending: DefaultMaxPending,
	}
	for _, o := range opts {
		o(l)
	}
	l.breakerCfg = l.breakerCfg.withDefaults()
	if l.inline {
		l.shared = newSharedDeadlines(l.deadline)
	}
	l.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](l.breakerCfg.settings("sluice", func(from, to BreakerState) {
		l.state.Store(uint32(to))
		if l.onChange != nil {
			l.onChange(from, to)
		}
	}))
	if l.local != nil {
		l.localOnce.Do(func() {})
		l.localMade.Store(true)
	}
	return l
}

// State returns the circuit breaker's state now. An open breaker whose OpenFor has passed
// reports half-open.
func (l *Limiter) State() BreakerState { return stateOf(l.cb.State()) }

// Deadline returns the longest a decision waits for the store.
func (l *Limiter) Deadline() time.Duration { return l.deadline }

// Close stops deciding (later calls return an error wrapping sluice.ErrClosed), waits for
// store calls still running (they end when the store honours their context or answers),
// and closes the local limiter if New made it. It does not close the primary.
func (l *Limiter) Close() error {
	l.closeMu.Lock()
	already := l.closed.Swap(true)
	l.closeMu.Unlock()
	if already {
		return nil
	}
	l.calls.Wait()
	if l.ownLocal {
		if c, ok := l.local.(interface{ Close() error }); ok {
			return c.Close()
		}
	}
	return nil
}

func (l *Limiter) localLimiter() sluice.Limiter {
	l.localOnce.Do(func() {
		l.local = memory.New(memory.WithMaxKeys(1 << 20))
		l.ownLocal = true
		l.localMade.Store(true)
	})
	return l.local
}

// AllowN implements sluice.Limiter. Bad input is returned as is (never failed open). The
// store decides within the deadline, unless the breaker is open; on a store failure the
// decision's Fallback decides (see Mode). A caller whose own context ends first gets its
// context's error.
func (l *Limiter) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	if err := sluice.CheckRequest(key, limit, n); err != nil {
		return sluice.Decision{}, err
	}
	rep := reportFrom(ctx)
	d, err, failed := call(l, ctx, rep, true, keyArgs{l.primary, key, limit, n}, allowN)
	if !failed {
		return d, err
	}
	fb := l.resolve(ctx, key, limit)
	if rep != nil {
		rep.Fallback = fb
	}
	switch fb.Mode {
	case FailClosed:
		return sluice.Decision{Limit: limit, RetryAfter: l.breakerCfg.OpenFor, Path: sluice.PathClosed}, unavailable(err)
	case FailLocal:
		return l.allowLocal(ctx, key, ShareOf(limit, fb.Share), n)
	default:
		return sluice.Decision{Allowed: true, Limit: limit, Path: sluice.PathOpen}, nil
	}
}

func (l *Limiter) allowLocal(ctx context.Context, key string, share sluice.Limit, n int64) (sluice.Decision, error) {
	local := l.localLimiter()
	if n > share.MaxCost() {
		// The share can never admit this cost; the store may once it is back.
		d, err := local.AllowN(ctx, key, share, 0)
		if err != nil {
			return sluice.Decision{}, err
		}
		d.Allowed, d.RetryAfter, d.Path = false, l.breakerCfg.OpenFor, sluice.PathLocal
		return d, nil
	}
	d, err := local.AllowN(ctx, key, share, n)
	d.Path = sluice.PathLocal
	return d, err
}

// AllowMulti implements sluice.MultiLimiter when the primary does; otherwise it returns
// an error wrapping sluice.ErrNotAtomic and spends nothing.
//
// On a store failure the batch takes the strictest mode among its requests' Fallbacks
// (FailClosed, then FailLocal, then FailOpen): FailOpen allows every request,
// FailClosed denies every one with an error wrapping sluice.ErrStoreUnavailable, and
// FailLocal decides the batch atomically on the local limiter, each request under its
// own share.
func (l *Limiter) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	ml, ok := l.primary.(sluice.MultiLimiter)
	if !ok {
		return nil, fmt.Errorf("failover: %w: the primary store %T has no AllowMulti", sluice.ErrNotAtomic, l.primary)
	}
	for i, r := range reqs {
		if err := sluice.CheckRequest(r.Key, r.Limit, r.N); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	rep := reportFrom(ctx)
	ds, err, failed := call(l, ctx, rep, true, reqs, ml.AllowMulti)
	if !failed {
		return ds, err
	}
	fbs := make([]Fallback, len(reqs))
	mode := FailOpen
	for i, r := range reqs {
		fbs[i] = l.resolve(ctx, r.Key, r.Limit)
		if strictness(fbs[i].Mode) > strictness(mode) {
			mode = fbs[i].Mode
		}
	}
	if rep != nil {
		rep.Fallback = Fallback{Mode: mode, Share: fbs[0].Share}
	}
	out := make([]sluice.Decision, len(reqs))
	switch mode {
	case FailClosed:
		for i, r := range reqs {
			out[i] = sluice.Decision{Limit: r.Limit, RetryAfter: l.breakerCfg.OpenFor, Path: sluice.PathClosed}
		}
		return out, unavailable(err)
	case FailLocal:
		return l.allowMultiLocal(ctx, reqs, fbs)
	default:
		for i, r := range reqs {
			out[i] = sluice.Decision{Allowed: true, Limit: r.Limit, Path: sluice.PathOpen}
		}
		return out, nil
	}
}

func (l *Limiter) allowMultiLocal(ctx context.Context, reqs []sluice.Request, fbs []Fallback) ([]sluice.Decision, error) {
	local := l.localLimiter()
	shared := make([]sluice.Request, len(reqs))
	tooBig := false
	for i, r := range reqs {
		shared[i] = sluice.Request{Key: r.Key, Limit: ShareOf(r.Limit, fbs[i].Share), N: r.N}
		if r.N > shared[i].Limit.MaxCost() {
			tooBig = true
		}
	}
	var out []sluice.Decision
	var err error
	if tooBig {
		// Some cost can never fit its share: deny the batch, spending nothing.
		out = make([]sluice.Decision, len(shared))
		for i, r := range shared {
			if out[i], err = local.AllowN(ctx, r.Key, r.Limit, 0); err != nil {
				return nil, err
			}
			out[i].Allowed, out[i].RetryAfter = false, 0
			if r.N > r.Limit.MaxCost() {
				out[i].RetryAfter = l.breakerCfg.OpenFor
			}
		}
	} else if ml, ok := local.(sluice.MultiLimiter); ok {
		if out, err = ml.AllowMulti(ctx, shared); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("failover: %w: the local limiter %T has no AllowMulti", sluice.ErrNotAtomic, local)
	}
	for i := range out {
		out[i].Path = sluice.PathLocal
	}
	return out, nil
}

// Reset implements sluice.Limiter: it resets key's state in the store (within the
// deadline, through the breaker) and in the local limiter. A store failure returns an
// error wrapping sluice.ErrStoreUnavailable.
func (l *Limiter) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := sluice.CheckRequest(key, limit, 0); err != nil {
		return err
	}
	_, err, failed := call(l, ctx, reportFrom(ctx), false, keyArgs{l.primary, key, limit, 0}, reset)
	if l.localMade.Load() {
		fb := l.resolve(ctx, key, limit)
		_ = l.localLimiter().Reset(ctx, key, ShareOf(limit, fb.Share))
	}
	if failed {
		return unavailable(err)
	}
	return err
}

func unavailable(cause error) error {
	return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, cause)
}

func strictness(m Mode) int {
	switch m {
	case FailClosed:
		return 3
	case FailLocal:
		return 2
	case FailOpen:
		return 1
	}
	return 0
}

// resolve returns the Fallback of one decision (see Fallback for the rules).
func (l *Limiter) resolve(ctx context.Context, key string, limit sluice.Limit) Fallback {
	f, _ := FallbackFrom(ctx)
	f = f.merge(Fallback{})
	if l.fbFunc != nil && (f.Mode == Unset || f.Share == 0) {
		f = f.merge(l.fbFunc(ctx, key, limit))
	}
	return f.merge(l.def)
}

type result[T any] struct {
	v   T
	err error
}

// call runs f, the store call, through the breaker and within the deadline. It returns
// f's result and failed == false when the store answered (successfully, or with an error
// that is not a store failure, such as bad input), and the cause with failed == true when
// the failure mode must decide.
//
// f runs in its own goroutine so that the caller is released at the deadline even if
// the store ignores its context; the goroutine ends when f returns, and at most
// maxPending such goroutines run at any time. A half-open breaker's probe runs with
// ProbeTimeout instead, detached from the caller (see Breaker).
//
// With WithInlineCalls, f runs on the caller's goroutine with the deadline in its
// context; for a decision (not a Reset), that context is a shared deadline (see
// sharedDeadlines), which ends at most the deadline after the call started.
//
// f gets its arguments as a, rather than from a closure, so that the inline path (a
// decision per call, on the hot path) allocates nothing for it.
func call[A, T any](l *Limiter, ctx context.Context, rep *Report, decision bool, a A, f func(context.Context, A) (T, error)) (v T, err error, failed bool) {
	if rep != nil {
		defer rep.fill(l, &err, &failed)
	}
	done, probe, err, failed, ok := l.enter(rep)
	if !ok {
		return v, err, failed
	}
	start := time.Now()
	if l.inline && !probe {
		if decision {
			v, err = f(l.shared.context(ctx, start), a)
		} else {
			cctx, cancel := context.WithTimeout(ctx, l.deadline)
			v, err = f(cctx, a)
			cancel()
		}
		err, failed = l.leaveInline(ctx, rep, start, err, done)
		return v, err, failed
	}
	return callAsync(l, ctx, rep, probe, start, done, a, f)
}

// keyArgs are the arguments of a store call on one key (call's a).
type keyArgs struct {
	store sluice.Limiter
	key   string
	limit sluice.Limit
	n     int64
}

func allowN(ctx context.Context, a keyArgs) (sluice.Decision, error) {
	return a.store.AllowN(ctx, a.key, a.limit, a.n)
}

func reset(ctx context.Context, a keyArgs) (struct{}, error) {
	return struct{}{}, a.store.Reset(ctx, a.key, a.limit)
}

// fill records in r the outcome of a call: the breaker's state, and the error.
func (r *Report) fill(l *Limiter, err *error, failed *bool) {
	r.set = true
	r.Breaker = BreakerState(l.state.Load())
	if *failed {
		r.Cause = *err
	}
	r.Kind = Classify(*err)
}

// enter lets a store call through the breaker, the pending bound and Close. When ok is
// false, the call must not be made and err, failed are its outcome; otherwise the caller
// calls the store and then done, l.pending.Add(-1) and l.calls.Done (leaveInline, or
// callAsync's goroutine). probe reports a half-open breaker's probe.
func (l *Limiter) enter(rep *Report) (done func(error), probe bool, err error, failed, ok bool) {
	if rep != nil {
		rep.set = true
	}
	if l.closed.Load() {
		return nil, false, fmt.Errorf("failover: %w", sluice.ErrClosed), false, false
	}
	done, berr := l.cb.Allow()
	if berr != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrBreakerOpen, berr), true, false
	}
	// Allow has made any due change (open to half-open), so the mirror is current: a call
	// let through half-open is a probe. (If the breaker closes meanwhile, treating the
	// call as a probe or not makes no difference to it.)
	probe = BreakerState(l.state.Load()) == BreakerHalfOpen
	if l.pending.Add(1) > l.maxPending {
		l.pending.Add(-1)
		done(ErrOverload)
		return nil, false, ErrOverload, true, false
	}
	l.closeMu.RLock()
	if l.closed.Load() {
		l.closeMu.RUnlock()
		l.pending.Add(-1)
		done(errExcluded)
		return nil, false, fmt.Errorf("failover: %w", sluice.ErrClosed), false, false
	}
	l.calls.Add(1)
	l.closeMu.RUnlock()
	return done, probe, nil, false, true
}

// leaveInline ends an inline store call that started at start and answered err: it
// reports the call to the breaker and returns the error to return and whether the
// failure mode must decide.
func (l *Limiter) leaveInline(ctx context.Context, rep *Report, start time.Time, err error, done func(error)) (error, bool) {
	l.pending.Add(-1)
	l.calls.Done()
	if rep != nil {
		rep.Called, rep.StoreLatency = true, time.Since(start)
	}
	brk, failed := judge(ctx, err)
	done(brk)
	if failed && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%v): %w", ErrDeadline, l.deadline, err)
	}
	return err, failed
}

// callAsync runs f, let through by enter, in a goroutine of its own (see call).
func callAsync[A, T any](l *Limiter, ctx context.Context, rep *Report, probe bool, start time.Time, done func(error), a A, f func(context.Context, A) (T, error)) (v T, err error, failed bool) {
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
	ch := make(chan result[T], 1)
	go func() {
		defer l.calls.Done()
		defer l.pending.Add(-1)
		defer cancel()
		v, err := f(cctx, a)
		if probe {
			// The probe's outcome is the store's, whenever it comes and whoever waits;
			// but only an answer within the deadline shows the store can serve again.
			brk, _ := judge(context.Background(), err)
			if brk == nil && time.Since(start) > l.deadline {
				brk = ErrDeadline
			}
			done(brk)
		}
		ch <- result[T]{v, err} // buffered: never blocks, even when the caller has left
	}()

	var r result[T]
	select {
	case r = <-ch:
	case <-expired:
		r, err, failed = giveUp(l, ctx, ch, rep, start, probe, done)
		if err != nil {
			return v, err, failed
		}
	case <-ctx.Done():
		r, err, failed = giveUp(l, ctx, ch, rep, start, probe, done)
		if err != nil {
			return v, err, failed
		}
	}
	if rep != nil {
		rep.Called, rep.StoreLatency = true, time.Since(start)
	}
	brk, failed := judge(ctx, r.err)
	if !probe {
		done(brk)
	}
	return r.v, r.err, failed
}

// giveUp releases a caller whose deadline passed or whose own context ended before the
// store answered. If the answer has arrived meanwhile it is returned with a nil error
// instead.
func giveUp[T any](l *Limiter, ctx context.Context, ch chan result[T], rep *Report, start time.Time, probe bool, done func(error)) (r result[T], err error, failed bool) {
	select {
	case r = <-ch:
		return r, nil, false
	default:
	}
	if rep != nil {
		rep.Called, rep.StoreLatency = true, time.Since(start)
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller's own context ended: nothing to say about the store.
		if !probe {
			done(errExcluded)
		}
		return r, fmt.Errorf("failover: %w", cerr), false
	}
	if !probe {
		done(ErrDeadline)
	}
	return r, fmt.Errorf("%w (%v)", ErrDeadline, l.deadline), true
}

// judge returns what the breaker is told about a store call that answered err, and
// whether err is a store failure. ctx is the caller's: an error caused by its own
// cancellation or deadline says nothing about the store.
func judge(ctx context.Context, err error) (brk error, failed bool) {
	switch {
	case err == nil:
		return nil, false
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return errExcluded, false
	case Classify(err).IsFailure():
		return err, true
	}
	return errExcluded, false
}
