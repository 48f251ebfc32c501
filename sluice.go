// Package sluice is a rate limiter for Go services: the contract that every part of it
// keeps, and the calls a program makes.
//
// A [Limiter] decides a slice of [Request] values (each a key, a [Limit] and a cost) as
// one request, all or nothing, writes a [Decision] for each, and returns a [Report] of
// what the layers learned. Errors wrap the sentinel errors below for bad input, and
// [StoreError] for store failures; [KindOf] classifies them. [Allow], [AllowN] and [Wait]
// are the single-limit conveniences.
//
// Six algorithms ([Algorithm]) are pure integer state machines, written once; the
// in-process store (package memory) and the Redis store (package redisstore) run the same
// machines and give identical decisions for identical inputs and clocks. Time is integer
// microseconds since the Unix epoch; no floating point takes part in a decision.
//
// Everything else is a decorator around a Limiter: the front ends (packages httplimit and
// server) above the layers that package stack builds, in its documented order. Package
// [github.com/sluicehq/sluice/store] holds what only an implementation of Limiter needs:
// the validation every store runs, the bounds it enforces, the classes of its failures.
package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm selects the state machine that decides a Limit. The zero value is GCRA.
//
// Time is counted in whole microseconds, and a Period is truncated to them. The bucket
// algorithms (GCRA, TokenBucket, LeakyBucket) space events by exactly Period/Rate,
// counting in fractions of a microsecond when Rate does not divide Period (for 7 per
// second, sevenths: a client sending 7 in each second, spread out or all at once, is never
// denied); RetryAfter and ResetAfter are rounded up to whole microseconds. Only a limit
// whose Burst·Period is too large for that (above 2^50 µs once Period/Rate is in lowest
// terms) counts whole microseconds, with T = ⌈Period/Rate⌉: it then never admits more
// than the configured rate, and falls short by less than 1 µs per event. A limit whose
// Period/Rate is below 1 µs is invalid.
//
// Error bounds are stated against an exact sliding window of length Period, i.e. the largest
// number of units admitted in any interval (t-Period, t]:
//
//	SlidingLog     exactly Rate (it is the exact sliding window)
//	FixedWindow    2·Rate (Rate at the end of one window, Rate at the start of the next)
//	SlidingWindow  at most 2·Rate in the worst case; for steady traffic it is within the
//	               approximation error of weighting the previous window by overlap
//	GCRA, TokenBucket, LeakyBucket
//	               Burst + Rate·d/Period in any interval of length d: Burst at once,
//	               then one unit every Period/Rate (so at most Burst + Rate - 1 in one
//	               Period)
type Algorithm uint8

const (
	// GCRA is the generic cell rate algorithm (virtual scheduling): one timestamp per key,
	// the theoretical arrival time, with tolerance (Burst-1)·Period/Rate.
	GCRA Algorithm = iota
	// TokenBucket holds up to Burst tokens refilled continuously at Rate per Period. It is
	// GCRA under another name: the two admit the same requests with the same Decisions,
	// by one state machine. A Limit keeps the name it was given, and state is kept per
	// Limit, so a GCRA and a TokenBucket limit of the same numbers count apart.
	TokenBucket
	// LeakyBucket is the leaky bucket as a meter: a level that drains at Rate per Period,
	// capacity Burst. Like TokenBucket it is GCRA under another name.
	LeakyBucket
	// FixedWindow counts events in windows of length Period aligned to multiples of Period
	// since the Unix epoch.
	FixedWindow
	// SlidingWindow is the sliding window counter: the current window's count plus the
	// previous window's count weighted by its overlap with the sliding window.
	SlidingWindow
	// SlidingLog keeps the timestamps of admitted events (at most Rate of them) and is exact.
	SlidingLog
	// Concurrency limits requests in flight rather than a rate: at most Rate requests of a
	// key hold a lease at once. Each admitted request takes one lease (Decision.Lease),
	// held until Limiter.Release or until Limit.Lease has passed, whichever is first, so a
	// holder that crashes frees its slot by itself. Period and Burst are not used.
	Concurrency

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	GCRA:          "gcra",
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
}

// String returns the algorithm's snake_case name, as used in configuration files.
func (a Algorithm) String() string { return enumName(algorithmNames[:], a, "algorithm") }

// enumName is names[v], or kind(v) for a value that has no name.
func enumName[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// valid reports whether a names one of the algorithms.
func (a Algorithm) valid() bool { return a < numAlgorithms }

// ParseAlgorithm parses an algorithm name as printed by String. It also accepts hyphens for
// underscores and is case-insensitive.
func ParseAlgorithm(s string) (Algorithm, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for i, name := range algorithmNames {
		if norm == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalidLimit, s, strings.Join(algorithmNames[:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Limit is Rate events per Period, decided by Algorithm.
//
// Burst is the bucket depth for GCRA, TokenBucket and LeakyBucket: how many units may pass at
// once after a quiet spell. Zero means Rate. The window algorithms ignore Burst.
//
// A Concurrency limit allows Rate requests in flight, each holding its lease for at most
// Lease (see InFlight); Period and Burst must be zero. The other algorithms ignore Lease,
// which must be zero for them.
//
// Calendar, when set, makes a FixedWindow limit a calendar quota: Rate events per
// calendar period ([Calendar]); Period must then be 0.
//
// The zero Limit is invalid (Rate 0); use PerSecond and friends or fill every field.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	Lease     time.Duration
	Calendar  Calendar
}

// PerCalendar returns a calendar quota of rate events per period c (see Calendar).
func PerCalendar(rate int64, c Calendar) Limit {
	return Limit{Algorithm: FixedWindow, Rate: rate, Calendar: c}
}

// InFlight returns a Concurrency limit: at most n requests in flight, each lease expiring
// after lease unless released sooner.
func InFlight(n int64, lease time.Duration) Limit {
	return Limit{Algorithm: Concurrency, Rate: n, Lease: lease}
}

// PerSecond returns a GCRA limit of rate events per second with burst rate.
func PerSecond(rate int64) Limit { return Limit{Algorithm: GCRA, Rate: rate, Period: time.Second} }

// PerMinute returns a GCRA limit of rate events per minute with burst rate.
func PerMinute(rate int64) Limit { return Limit{Algorithm: GCRA, Rate: rate, Period: time.Minute} }

// PerHour returns a GCRA limit of rate events per hour with burst rate.
func PerHour(rate int64) Limit { return Limit{Algorithm: GCRA, Rate: rate, Period: time.Hour} }

// PerDay returns a GCRA limit of rate events per 24 hours with burst rate. The day is a
// rolling 24 hours (or, for FixedWindow, a UTC day), never a local calendar day.
func PerDay(rate int64) Limit { return Limit{Algorithm: GCRA, Rate: rate, Period: 24 * time.Hour} }

// With returns a copy of l decided by algorithm a.
func (l Limit) With(a Algorithm) Limit { l.Algorithm = a; return l }

// WithBurst returns a copy of l with the given burst.
func (l Limit) WithBurst(burst int64) Limit { l.Burst = burst; return l }

// Bounds of a Limit; package store exports them (store.maxPeriod, ...) and documents why.
const (
	maxPeriod  = 1 << 50 * time.Microsecond
	maxRate    = 1 << 40
	maxLogRate = 1 << 20
	maxLease   = 24 * time.Hour
)

// Validate reports whether l can be decided. The error wraps [ErrInvalidLimit] and names
// the offending field. Rate and Burst are at most 2^40, Period at most 2^50 µs (about
// 35.7 years), and so is a bucket's refill time, Burst·Period/Rate; a SlidingLog's Rate
// and a Concurrency limit's are at most 2^20, and a Lease at most a day. These bounds keep
// every intermediate exact in Lua; package store names them.
func (l Limit) Validate() error {
	if l.Algorithm == Concurrency {
		return l.validateConcurrency()
	}
	switch {
	case !l.Algorithm.valid():
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, uint8(l.Algorithm))
	case l.Lease != 0:
		return fmt.Errorf("%w: lease is for concurrency limits only; %v has lease %v", ErrInvalidLimit, l, l.Lease)
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate must be positive, got %d", ErrInvalidLimit, l.Rate)
	case l.Rate > maxRate:
		return fmt.Errorf("%w: rate %d exceeds the maximum %d", ErrInvalidLimit, l.Rate, int64(maxRate))
	}
	if !l.Calendar.IsZero() {
		switch {
		case l.Algorithm != FixedWindow:
			return fmt.Errorf("%w: a calendar period is counted by fixed_window, not %v", ErrInvalidLimit, l.Algorithm)
		case l.Period != 0:
			return fmt.Errorf("%w: a calendar limit has no period, got %v", ErrInvalidLimit, l.Period)
		case l.Burst != 0:
			return fmt.Errorf("%w: a calendar limit has no burst, got %d", ErrInvalidLimit, l.Burst)
		}
		return l.Calendar.validate()
	}
	switch {
	case l.Period < time.Microsecond:
		return fmt.Errorf("%w: period must be at least 1µs, got %v", ErrInvalidLimit, l.Period)
	case l.Period > maxPeriod:
		return fmt.Errorf("%w: period %v exceeds the maximum %v", ErrInvalidLimit, l.Period, maxPeriod)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	case l.Burst > maxRate:
		return fmt.Errorf("%w: burst %d exceeds the maximum %d", ErrInvalidLimit, l.Burst, int64(maxRate))
	}
	switch l.Algorithm {
	case GCRA, TokenBucket, LeakyBucket:
		if l.Rate > l.Period.Microseconds() {
			return fmt.Errorf("%w: %d per %v spaces events less than 1µs apart; use a longer period or a window algorithm",
				ErrInvalidLimit, l.Rate, l.Period)
		}
		t := ceilDiv(l.Period.Microseconds(), l.Rate)
		if b := l.effectiveBurst(); b > int64(maxPeriod/time.Microsecond)/t {
			return fmt.Errorf("%w: burst %d × interval %dµs exceeds the maximum %v to refill a bucket",
				ErrInvalidLimit, b, t, maxPeriod)
		}
	case SlidingLog:
		if l.Rate > maxLogRate {
			return fmt.Errorf("%w: sliding_log keeps one timestamp per unit; rate %d exceeds its maximum %d (use sliding_window)",
				ErrInvalidLimit, l.Rate, int64(maxLogRate))
		}
	}
	return nil
}

func (l Limit) validateConcurrency() error {
	switch {
	case l.Rate <= 0:
		return fmt.Errorf("%w: concurrency must be positive, got %d", ErrInvalidLimit, l.Rate)
	case l.Rate > maxLogRate:
		return fmt.Errorf("%w: concurrency keeps one lease per request; %d exceeds its maximum %d", ErrInvalidLimit, l.Rate, int64(maxLogRate))
	case l.Lease <= 0:
		return fmt.Errorf("%w: a concurrency limit needs a lease TTL (lease), got %v", ErrInvalidLimit, l.Lease)
	case l.Lease < time.Millisecond:
		return fmt.Errorf("%w: lease must be at least 1ms, got %v", ErrInvalidLimit, l.Lease)
	case l.Lease > maxLease:
		return fmt.Errorf("%w: lease %v exceeds the maximum %v", ErrInvalidLimit, l.Lease, maxLease)
	case l.Period != 0:
		return fmt.Errorf("%w: a concurrency limit has no period (got %v); its lease bounds each request", ErrInvalidLimit, l.Period)
	case l.Burst != 0:
		return fmt.Errorf("%w: a concurrency limit has no burst, got %d", ErrInvalidLimit, l.Burst)
	}
	return nil
}

// effectiveBurst is the bucket depth the bucket algorithms use: Burst, or Rate when
// Burst is 0. For the window algorithms it is Rate.
func (l Limit) effectiveBurst() int64 {
	switch l.Algorithm {
	case GCRA, TokenBucket, LeakyBucket:
		if l.Burst > 0 {
			return l.Burst
		}
	}
	return l.Rate
}

// MaxCost is the largest cost the limit can ever allow in one call: the burst for the bucket
// algorithms, Rate for the window algorithms, 1 for Concurrency (a request holds one
// lease, whatever else it costs).
func (l Limit) MaxCost() int64 {
	if l.Algorithm == Concurrency {
		return 1
	}
	return l.effectiveBurst()
}

// String formats l as "10/1s gcra burst 20", or a Concurrency limit as "10 concurrency
// lease 30s".
func (l Limit) String() string {
	if l.Algorithm == Concurrency {
		return fmt.Sprintf("%d %v lease %v", l.Rate, l.Algorithm, l.Lease)
	}
	if !l.Calendar.IsZero() {
		return fmt.Sprintf("%d/%v", l.Rate, l.Calendar)
	}
	s := fmt.Sprintf("%d/%v %v", l.Rate, l.Period, l.Algorithm)
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Path says how a Decision was reached. The zero value means the store decided; PathOpen,
// PathClosed and PathLocal are the decisions of the failure modes ([FailureMode]) of the
// same names, made without consulting the store.
type Path uint8

const (
	// PathStore: the store decided.
	PathStore  Path = iota
	PathOpen        // FailOpen decided
	PathClosed      // FailClosed decided
	PathLocal       // FailLocal decided
	// PathCache: a cache of the store's denials (package denycache) answered from an
	// earlier denial of the same key, limit and cost, which still held.
	PathCache
)

var pathNames = [...]string{"store", "open", "closed", "local", "cache"}

func (p Path) String() string { return enumName(pathNames[:], p, "path") }

// Decision is everything the limiter saw and decided. Headers and logs are built from it.
type Decision struct {
	// Allowed reports whether the n units were admitted (and spent).
	Allowed bool
	// Limit is the limit that was applied.
	Limit Limit
	// Remaining is how many more units would be allowed right now, after this call.
	// It is never negative.
	Remaining int64
	// ResetAfter is the time until the key's state is back to empty (a full bucket, an
	// empty window): after it, Remaining would be [Limit.MaxCost]. Never negative. For a
	// calendar limit it is always the time to the next period start, counted or not.
	ResetAfter time.Duration
	// RetryAfter is the time until the same cost would be allowed, if nothing else is spent
	// meanwhile. It is 0 when Allowed (and for a cost that would pass now), never negative.
	RetryAfter time.Duration
	// Path says how the decision was reached.
	Path Path
	// Lease identifies the lease an allowed request of cost 1 took under a Concurrency
	// limit; give it to Limiter.Release when the request is done. Zero otherwise, and for
	// a decision of a failure mode that consulted no state (PathOpen).
	//
	// For Concurrency, Remaining is the free slots, ResetAfter the time until every lease
	// held has expired, and RetryAfter the time until the oldest lease expires: an upper
	// bound, since a holder may release sooner.
	Lease LeaseID
	// Reservation identifies the reservation an allowed request with a SettleTTL made:
	// give it to Limiter.Settle with the actual cost. Zero otherwise.
	Reservation ReservationID
	// Window is, for a calendar limit decided by a store, the length of the calendar
	// period the decision fell in (months, and days across DST, differ); 0 otherwise.
	Window time.Duration
}

// Limiter decides whether events fit under limits. It is the contract every store and
// every decorator satisfies, so that a stack of them (see package stack) keeps each
// promise below whatever wraps it.
//
// Implementations are safe for concurrent use. The key identifies who is limited; a store
// keeps separate state for each (key, Limit), so one key may carry several limits (10/s and
// 1000/h) at once, and a key moved to a different Limit (a tier upgrade) starts afresh under
// it while its state under the old Limit expires.
type Limiter interface {
	// Decide decides reqs as one request, all or nothing, and writes the decision of
	// reqs[i] into ds[i] (ds must have at least len(reqs) elements). Either every request
	// fits and all are spent, or nothing is spent: then every Decision has Allowed false,
	// a request that alone would have passed has RetryAfter 0, and the ones that blocked
	// have the time until they would pass. A (key, Limit) may appear only once. A request
	// with N == 0 spends nothing: its Decision reports whether one more unit would be
	// allowed now and the current Remaining.
	//
	// The Report says what the layers learned: whether the store was asked and how long
	// it took, the failure a failure mode absorbed, the breaker's state.
	//
	// Errors wrap ErrInvalidLimit, ErrInvalidCost, ErrCostExceedsLimit or ErrInvalidKey
	// for bad input (nothing is spent), and other errors, classified by [KindOf], for store
	// failures.
	Decide(ctx context.Context, reqs []Request, ds []Decision) (Report, error)
	// Reserve spends n units of key's quota under limit at the earliest instant they fit
	// (see Reservation), so that callers pace rather than fail. A reservation is exactly
	// what Decide would have allowed at that instant, on the same state. The deadline of ctx, if any, is the longest the caller will wait: a
	// reservation whose instant would fall after it is refused (OK false) and spends
	// nothing. Input is validated as Decide validates it; n == 0 is OK at once. Only GCRA,
	// TokenBucket and LeakyBucket limits can be reserved; the others are an error wrapping
	// ErrInvalidLimit.
	Reserve(ctx context.Context, key string, limit Limit, n int64) (Reservation, error)
	// Reset forgets key's state under limit.
	Reset(ctx context.Context, key string, limit Limit) error
	// Release gives back the lease a Decision under a Concurrency limit took
	// (Decision.Lease), freeing its slot at once. It reports whether the lease was held:
	// false, and no error, for a lease that has expired, was released already or was
	// never taken (a release is harmless, and may be repeated). limit must be a
	// Concurrency limit (else ErrInvalidLimit) and lease a Decision's (else
	// ErrInvalidLease); a release error from a store failure leaves the lease to expire.
	Release(ctx context.Context, key string, limit Limit, lease LeaseID) (bool, error)
	// Settle settles the reservation a Decision under limit made (Decision.Reservation,
	// from a Request with a SettleTTL) at the actual cost: the difference from the
	// estimate is given back when the cost is lower and charged when it is higher, never
	// past the state's bounds (a charge stops where the state is empty, and may deny the
	// next requests). It returns a look (cost 0) at the key afterwards.
	//
	// GCRA, TokenBucket, LeakyBucket, FixedWindow and SlidingWindow limits settle;
	// SlidingLog and Concurrency do not (ErrInvalidLimit). A negative cost is an error
	// wrapping ErrInvalidCost; a reservation that was never made, or whose SettleTTL has
	// passed (it then stands at its estimate), ErrUnknownReservation; a second settlement
	// of one reservation ErrSettled. Those change nothing.
	Settle(ctx context.Context, key string, limit Limit, reservation ReservationID, cost int64) (Decision, error)
}

// Request is one limit of a decision: who (Key), under which Limit, at what cost (N),
// and what the layers above the store need to know about it.
type Request struct {
	Key   string
	Limit Limit
	N     int64
	// Policy names the policy (or Envoy rule) the limit belongs to, for decision logs and
	// metrics. Empty means unnamed.
	Policy string
	// Shadow marks a limit that measures without enforcing. A store decides it like any
	// other request; a failover decorator never lets its failure deny. Deciding shadow
	// limits apart from the enforced ones is the caller's part (package evaluator).
	Shadow bool
	// Failure says how the limit is decided when the store cannot decide it. The zero
	// value takes the failover decorator's default.
	Failure Failure
	// SettleTTL, when positive, makes N an estimate: an allowed decision spends N and
	// records a reservation (Decision.Reservation) that Limiter.Settle settles at the
	// actual cost within SettleTTL; one not settled by then stands at N. Only the
	// algorithms that can settle take it (see [Limiter.Settle]); at most a day.
	SettleTTL time.Duration
}

// Report is what the layers of a Limiter learned while deciding one call, returned with
// its decisions. The zero Report means the store was not asked and nothing failed.
type Report struct {
	// StoreCalled reports whether a store was asked (false for bad input, answers from a
	// deny cache, and an open breaker).
	StoreCalled bool
	// StoreLatency is the time from asking the store until its answer or the deadline.
	StoreLatency time.Duration
	// Failure is the store failure that a failure mode absorbed (the decisions then have
	// Path PathOpen, PathClosed or PathLocal); nil when the store decided.
	Failure error
	// Kind classifies Failure, or the error Decide returned; "" when there was none.
	Kind ErrorKind
	// Fallback is the failure mode and share that decided, when Failure is set.
	Fallback Failure
	// Breaker is the circuit breaker's state after the call; the zero BreakerState when
	// no breaker took part.
	Breaker BreakerState
}

// AllowN spends n units of key's quota under limit with l, if they fit: Decide of one
// request. Denied requests spend nothing; n == 0 only looks.
func AllowN(ctx context.Context, l Limiter, key string, limit Limit, n int64) (Decision, error) {
	var d [1]Decision
	_, err := l.Decide(ctx, []Request{{Key: key, Limit: limit, N: n}}, d[:])
	return d[0], err
}

// Allow is AllowN(ctx, l, key, limit, 1).
func Allow(ctx context.Context, l Limiter, key string, limit Limit) (Decision, error) {
	return AllowN(ctx, l, key, limit, 1)
}

// AllowMulti decides reqs with l, all or nothing, and returns their decisions in order.
func AllowMulti(ctx context.Context, l Limiter, reqs []Request) ([]Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	ds := make([]Decision, len(reqs))
	if _, err := l.Decide(ctx, reqs, ds); err != nil {
		return nil, err
	}
	return ds, nil
}

// isBadInput reports whether err wraps a sentinel error of bad input (see KindOf).
func isBadInput(err error) bool {
	return errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrInvalidCost) ||
		errors.Is(err, ErrCostExceedsLimit) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrInvalidLease) || errors.Is(err, ErrUnknownReservation) || errors.Is(err, ErrSettled)
}

// Sentinel errors. Stores wrap them with %w and detail.
var (
	// ErrInvalidLimit: the Limit cannot be decided (see Limit.Validate).
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost: a negative cost.
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrCostExceedsLimit: the cost is larger than the limit can ever allow ([Limit.MaxCost]).
	ErrCostExceedsLimit = errors.New("sluice: cost exceeds limit")
	// ErrInvalidKey: an empty key, or one longer than 64 KiB.
	ErrInvalidKey = errors.New("sluice: invalid key")
	// ErrInvalidLease: a lease id that no store gives out (see LeaseID).
	ErrInvalidLease = errors.New("sluice: invalid lease")
	// ErrUnknownReservation: a settlement of a reservation the store does not hold: never
	// made, or past its SettleTTL (it then stands at its estimate).
	ErrUnknownReservation = errors.New("sluice: unknown reservation")
	// ErrSettled: a second settlement of one reservation.
	ErrSettled = errors.New("sluice: reservation already settled")
	// ErrStoreUnavailable: the store could not decide and the policy fails closed.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrClosed: the limiter has been closed.
	ErrClosed = errors.New("sluice: limiter closed")
)
