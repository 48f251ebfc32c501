package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// item is one limit of one request: a policy's limit, a policy's route limit, or one Envoy
// descriptor. Both APIs build a slice of items, decide it with decide, and report it.
type item struct {
	// name is what headers and the JSON answer call the limit.
	name string
	// status is how the limit was found; only Limited items reach the store.
	status config.Status
	// rule is the Envoy rule that matched (nil for policies and NoMatch).
	rule *config.Rule
	// unitMultiplier is an Envoy limit override's unit_multiplier (0 when none).
	unitMultiplier uint32
	// source, route describe a policy's limit: "policy", "tier:<name>", "override",
	// "route"; the route pattern.
	source, route string
	key           string
	limit         sluice.Limit
	n             int64
	shadow        bool

	dec     sluice.Decision
	decided bool
	// tooBig: n exceeds what the limit can ever allow; the item is over the limit without
	// spending (see sluice.ErrCostExceedsLimit).
	tooBig bool
}

// over reports whether the item is over its limit: denied by the store with a wait, an
// impossible cost, or a requests_per_unit 0 rule. Shadow items can be over too; whether
// that blocks the request is the caller's business.
func (it *item) over() bool {
	switch it.status {
	case config.Blocked:
		return true
	case config.Limited:
		return it.tooBig || (it.decided && !it.dec.Allowed && it.dec.RetryAfter > 0)
	}
	return false
}

// blocks reports whether the item denies the request.
func (it *item) blocks() bool { return !it.shadow && it.over() }

// prepare marks the items whose cost can never be allowed. A limit named more than once
// in one request (Envoy sends a descriptor twice when two of a route's actions produce
// it) is spent once per naming, so an item is judged by the cost of its key and limit up
// to and including it.
func prepare(items []item) {
	var idx [8]int
	limited := idx[:0]
	for i := range items {
		if items[i].status == config.Limited {
			limited = append(limited, i)
		}
	}
	var firsts [8]int
	first := firstOf(items, limited, firsts[:0])
	var sums [8]int64
	sum := sums[:0]
	if len(limited) > len(sums) {
		sum = make([]int64, 0, len(limited))
	}
	sum = sum[:len(limited)]
	for p, i := range limited {
		it := &items[i]
		f := first[p]
		sum[f] = addCost(sum[f], it.n)
		if sum[f] > it.limit.MaxCost() {
			it.tooBig = true
		}
	}
}

// addCost is a + b, saturating: costs come from requests (hits_addend is 64 bits).
func addCost(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// firstOf returns, for each position p of idx, the first position q <= p whose item has
// the same key and limit as item idx[p]. It appends to dst.
func firstOf(items []item, idx []int, dst []int) []int {
	type ident struct {
		key   string
		limit sluice.Limit
	}
	first := append(dst[:0], make([]int, len(idx))...)
	if len(idx) <= 8 {
		for p, i := range idx {
			first[p] = p
			for q := 0; q < p; q++ {
				if j := idx[q]; items[j].key == items[i].key && items[j].limit == items[i].limit {
					first[p] = q
					break
				}
			}
		}
		return first
	}
	seen := make(map[ident]int, len(idx))
	for p, i := range idx {
		id := ident{items[i].key, items[i].limit}
		q, ok := seen[id]
		if !ok {
			q = p
			seen[id] = p
		}
		first[p] = q
	}
	return first
}

// decide asks the limiter about every Limited item, with the semantics of the package doc:
// the enforced items in one atomic call when the limiter supports it (else one by one,
// stopping at the first denial), then, only if the request is allowed, the shadow items.
// Items not spent because the request was already denied are looked at with cost 0, so
// that every item reports its state. It returns whether the request is allowed (ignoring
// shadow items) and a store error, if any; bad input was ruled out by the caller.
func (s *Server) decide(ctx context.Context, items []item) (bool, error) {
	prepare(items)
	allowed := true
	for i := range items {
		if items[i].blocks() {
			allowed = false // a blocked rule or an impossible cost: spend nothing
		}
	}
	if allowed {
		var err error
		if allowed, err = s.enforce(ctx, items); err != nil {
			return false, err
		}
	}
	// What is left undecided (shadow items, and enforced items after a denial) is spent
	// only when the request passes; otherwise it is looked at.
	for i := range items {
		it := &items[i]
		if it.status != config.Limited || it.decided {
			continue
		}
		n := it.n
		if !allowed || it.tooBig {
			n = 0
		}
		d, err := s.limiter.AllowN(ctx, it.key, it.limit, n)
		if err != nil {
			if it.shadow && !sluice.IsBadInput(err) {
				// A shadow limit never affects the answer, not even when its store fails.
				s.log.LogAttrs(ctx, slog.LevelError, "shadow limit not decided",
					slog.String("limit", it.name), slog.String("error", err.Error()))
				continue
			}
			return false, err
		}
		it.set(d)
	}
	return allowed, nil
}

// enforce decides the enforced Limited items with cost, atomically when it can.
func (s *Server) enforce(ctx context.Context, items []item) (bool, error) {
	var idx [8]int
	enforced := idx[:0]
	for i := range items {
		if it := &items[i]; it.status == config.Limited && !it.shadow {
			enforced = append(enforced, i)
		}
	}
	switch {
	case len(enforced) == 0:
		return true, nil
	case len(enforced) > 1 && s.multi != nil:
		// One store request per key and limit: a limit named twice is one request for
		// the sum of the costs (a store takes a key and limit once per batch).
		var firsts, reqOf [8]int
		first := firstOf(items, enforced, firsts[:0])
		reqs := make([]sluice.Request, 0, len(enforced))
		req := append(reqOf[:0], first...) // the store request of each enforced item
		for p, i := range enforced {
			it := &items[i]
			if f := first[p]; f < p {
				req[p] = req[f]
				reqs[req[p]].N += it.n // prepare ruled out a sum above the limit's MaxCost
				continue
			}
			req[p] = len(reqs)
			reqs = append(reqs, sluice.Request{Key: it.key, Limit: it.limit, N: it.n})
		}
		ds, err := s.multi.AllowMulti(ctx, reqs)
		switch {
		case err == nil && len(ds) == len(reqs):
			allowed := true
			for _, d := range ds {
				allowed = allowed && d.Allowed
			}
			// Each item reports its request's decision as if its namings were spent one
			// after the other: Remaining after it and the namings before it, and, in a
			// denied batch, RetryAfter 0 (it alone would pass) while that spending fits.
			var spents [8]int64
			spent := append(spents[:0], make([]int64, len(reqs))...)
			for p, i := range enforced {
				r := req[p]
				d := ds[r]
				spent[r] += items[i].n
				if later := reqs[r].N - spent[r]; d.Allowed {
					d.Remaining += later
				} else if d.RetryAfter > 0 && spent[r] <= d.Remaining {
					d.RetryAfter = 0
				}
				items[i].set(d)
			}
			return allowed, nil
		case err == nil:
			return false, fmt.Errorf("server: AllowMulti returned %d decisions for %d requests", len(ds), len(reqs))
		case !errors.Is(err, sluice.ErrNotAtomic):
			return false, err
		}
		// ErrNotAtomic: nothing was spent; decide one by one.
	}
	for _, i := range enforced {
		it := &items[i]
		d, err := s.limiter.AllowN(ctx, it.key, it.limit, it.n)
		if err != nil {
			return false, err
		}
		it.set(d)
		if !d.Allowed {
			return false, nil
		}
	}
	return true, nil
}

func (it *item) set(d sluice.Decision) {
	if d.Limit == (sluice.Limit{}) {
		d.Limit = it.limit
	}
	it.dec, it.decided = d, true
}

// retryAfter is the longest wait among the items that block the request.
func retryAfter(items []item) time.Duration {
	var ra time.Duration
	for i := range items {
		if it := &items[i]; it.blocks() && it.decided {
			ra = max(ra, it.dec.RetryAfter)
		}
	}
	return ra
}

// windowReset is the time until the fixed window of length period that holds now ends,
// as the reference implementation reports duration_until_reset for a limit it did not
// consult (requests_per_unit 0).
func windowReset(now time.Time, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	us := now.UnixMicro()
	p := period.Microseconds()
	return time.Duration(p-us%p) * time.Microsecond
}
