// Package store is the part of sluice's contract that only an implementation of
// [sluice.Limiter] needs: the stores (memory, redisstore) and the decorators around them
// (denycache, failover, observe, region). A program that uses a Limiter needs it at
// most to name the class of an error ([sluice.KindOf] returns one of the kinds here).
//
// It holds what every implementation must agree on, so that each is written once:
//
//   - the validation every store runs before deciding ([CheckRequests], [CheckRequest],
//     [CheckSettle], [CheckRelease], [ValidKey]) and the bounds it enforces
//     ([MaxKeyLen], [MaxRate], ...);
//   - the classes a store gives its failures ([KindTimeout] ... [KindOther]), which a
//     [sluice.StoreError] carries and [sluice.KindOf] reads, and which of them a failure
//     mode absorbs ([IsFailure]);
//   - the states a circuit breaker reports in [sluice.Report] ([BreakerClosed], ...);
//   - the making of a cancellable [sluice.Reservation] ([WithCancel]);
//   - what a store derives from a Limit ([EffectiveBurst]) and the rate algorithms every
//     store decides alike ([Algorithms]), which differential tests range over.
package store

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Bounds of a [sluice.Limit], as [sluice.Limit.Validate] enforces them.
const (
	// MaxPeriod is the longest Period a Limit may have (2^50 µs, about 35.7 years): it
	// keeps every intermediate of every algorithm, up to now + 2·Period, below 2^53 µs,
	// where Lua's doubles are exact, before the year 2180. A bucket's refill time,
	// EffectiveBurst·Period/Rate, is bounded by it too.
	MaxPeriod = 1 << 50 * time.Microsecond
	// MaxRate is the largest Rate or Burst a Limit may have. It keeps counts exact in Lua
	// and the sliding log bounded.
	MaxRate = 1 << 40
	// MaxLogRate is the largest Rate a SlidingLog limit, and the largest concurrency a
	// Concurrency limit, may have: both keep one entry per admitted unit.
	MaxLogRate = 1 << 20
	// MaxLease is the longest Lease a Concurrency limit may have: a day. A lease is a
	// bound on a request's lifetime, not a quota period.
	MaxLease = 24 * time.Hour
)

// Bounds of a request, as [CheckRequest] and [CheckRequests] enforce them.
const (
	// MaxKeyLen is the longest key a store accepts.
	MaxKeyLen = 64 << 10
	// MaxSettleTTL is the longest a reservation waits for its settlement
	// ([sluice.Request.SettleTTL]).
	MaxSettleTTL = 24 * time.Hour
	// MaxLeaseID bounds the ids a store gives ([sluice.LeaseID], [sluice.ReservationID]):
	// they are in [1, MaxLeaseID], below 2^53, so that Redis's Lua holds them exactly.
	MaxLeaseID = 1<<53 - 1
)

// EffectiveBurst is the bucket depth the bucket algorithms (GCRA, TokenBucket,
// LeakyBucket) use for l: Burst, or Rate when Burst is 0. For the other algorithms it is
// Rate.
func EffectiveBurst(l sluice.Limit) int64 {
	if l.Algorithm == sluice.Concurrency {
		return l.Rate
	}
	return l.MaxCost()
}

// Breaker states, reported in [sluice.Report.Breaker] by a decorator with a circuit breaker
// in front of a store (package failover).
const (
	// BreakerNone: no breaker took part. The zero value.
	BreakerNone sluice.BreakerState = iota
	// BreakerClosed: the store is called for every decision.
	BreakerClosed
	// BreakerHalfOpen: a few probe calls go to the store; the other decisions use the
	// failure mode. Enough successful probes close the breaker, a failed one opens it.
	BreakerHalfOpen
	// BreakerOpen: the store is not called; every decision uses the failure mode.
	BreakerOpen
)

// Algorithms lists the six rate algorithms, in declaration order. Concurrency, which
// limits requests in flight rather than a rate, is not among them.
func Algorithms() []sluice.Algorithm {
	return []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
}
