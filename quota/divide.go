// Package quota divides global rate limits among the proxies that enforce them locally:
// the assignment logic of the Rate Limit Quota Service (RLQS, package server answers
// the protocol).
//
// A bucket has a global limit of Rate requests per period. Each client (one proxy
// stream) reports its demand on the bucket at every reporting interval and is answered
// with its share, a rate it enforces itself until its next report or until the share's
// TTL lapses. A [Store] keeps, per bucket, every client's weight, share and expiry, and
// rebalances the bucket at each report: the reporter's share is recomputed from the
// current weights of all live clients ([Share]), and the other clients' shares change at
// their own next reports. Clients whose share outlived its TTL without a report are
// dropped, and their shares return to the pool.
//
// The bound: the sum of the live shares of a bucket never exceeds its Rate, at every
// instant, on every store, because a share is never larger than what the others leave
// ([Share]). A growing client therefore waits for the shrinking ones to report: after a
// change of demand, shares follow it within two reporting intervals of the first report
// that measures it (one for every shrinking client to report, one for the growers).
//
// [Memory] keeps the state in process; [Redis] keeps it in Redis, for several instances.
package quota

import (
	"math/bits"
	"time"
)

// WeightScale is the largest weight: a demand is scaled to a weight in
// [0, WeightScale], proportional to the demand's share of the bucket's rate. It keeps
// Share's products below 2^53, where Lua's numbers are exact.
const WeightScale = 1 << 20

// MaxClients is the most clients one bucket is divided among; a new client beyond it
// is refused (Assignment.Rate -1). It keeps the sum of weights below 2^32.
const MaxClients = 4096

// DemandCap bounds a demand, in multiples of the bucket's rate: a client reporting
// more counts as demanding DemandCap times the whole limit.
const DemandCap = 16

// MaxRate is the largest rate of a bucket (TokenBucket.tokens_per_fill is a uint32).
const MaxRate = 1<<32 - 1

// Demand is a usage report as requests per period: (allowed + denied) requests over
// elapsed, scaled to period and rounded up, at most limit. elapsed ≤ 0 reads as one
// period (a report without time_elapsed counts its requests as one period's).
func Demand(allowed, denied uint64, elapsed, period time.Duration, limit int64) int64 {
	total, carry := bits.Add64(allowed, denied, 0)
	if carry != 0 || limit <= 0 {
		return max(limit, 0)
	}
	if elapsed <= 0 {
		elapsed = period
	}
	hi, lo := bits.Mul64(total, uint64(period))
	if hi >= uint64(elapsed) {
		return limit // the quotient does not fit 64 bits
	}
	q, r := bits.Div64(hi, lo, uint64(elapsed))
	if r != 0 {
		q++
	}
	return int64(min(q, uint64(limit)))
}

// Weight is a demand as a weight: ceil(min(demand, DemandCap·rate) × WeightScale /
// (DemandCap·rate)), in [0, WeightScale]; 0 only for no demand. rate must be in
// [1, MaxRate].
func Weight(demand, rate int64) int64 {
	if demand <= 0 || rate <= 0 {
		return 0
	}
	demand = min(demand, DemandCap*rate)
	return (demand*(WeightScale/DemandCap) + rate - 1) / rate // ≤ 2^52: no overflow
}

// Share is the one place the division is computed (rebalance.lua mirrors it). A bucket
// of rate R is divided among n clients, the reporter included, whose weights sum to
// total (the reporter's, w, included), while the other clients hold shares summing to
// others:
//
//	F = floor(R / (10(n+1)))              the floor, kept for every client and one more
//	A = R − (n+1)·F                       the part divided by weight
//	t = F + floor(A·w / total)            (F + floor(A / n) when total is 0)
//	share = min(t, max(0, R − others))
//
// State kept: none (the caller keeps weights and shares). Rounding: down, so the targets
// t of all n clients sum to at most R − F: one floor stays free for a client that
// arrives next, which gets it at its first report (the floor that lets a new client
// start), and a client's target deviates from the pure proportional R·w/total by at
// most R/10 + 1. Bound: the min with R − others keeps the sum of all shares ≤ R
// whatever the order of reports. Inputs: 1 ≤ n ≤ MaxClients, 0 ≤ w ≤ total ≤
// n·WeightScale, 0 ≤ R ≤ MaxRate, so A·w < 2^53.
func Share(rate, n, w, total, others int64) int64 {
	f := rate / (10 * (n + 1))
	a := rate - (n+1)*f
	t := f + a/n
	if total > 0 {
		t = f + a*w/total
	}
	return max(0, min(t, rate-others))
}

// TokenBucket is the token bucket a proxy enforces a share with: tokensPerFill = share
// tokens per period, and at most maxTokens = max(1, floor(share × burst / rate)) held,
// so that the buckets of all clients together hold at most burst + n tokens.
func TokenBucket(share, rate, burst int64) (maxTokens int64) {
	if rate <= 0 || share <= 0 || burst <= 0 {
		return 1
	}
	hi, lo := bits.Mul64(uint64(share), uint64(burst))
	q, _ := bits.Div64(hi%uint64(rate), lo, uint64(rate)) // share ≤ rate: hi < rate
	return max(1, int64(q))
}
