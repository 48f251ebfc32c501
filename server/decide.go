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
	// first is the index of the request's first Limited item naming the same key and
	// limit (the item itself when none before it does), and sum, on that first item, the
	// cost of all those namings; prepare sets both. req is the first item's request in
	// enforce's store batch.
	first, req int
	sum        int64
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
// to and including it. It also sets first and sum, which enforce batches by.
func prepare(items []item) {
	type ident struct {
		key   string
		limit sluice.Limit
	}
	var index map[ident]int // for requests of many items; a scan back serves the rest
	for i := range items {
		it := &items[i]
		if it.status != config.Limited {
			continue
		}
		it.first = i
		if len(items) <= 8 {
			for j := range i {
				if o := &items[j]; o.status == config.Limited && o.first == j && o.key == it.key && o.limit == it.limit {
					it.first = j
					break
				}
			}
		} else {
			if index == nil {
				index = make(map[ident]int, len(items))
			}
			id := ident{it.key, it.limit}
			if j, ok := index[id]; ok {
				it.first = j
			} else {
				index[id] = i
			}
		}
		f := &items[it.first]
		if f == it {
			f.sum = it.n
		} else {
			f.sum = addCost(f.sum, it.n)
		}
		if f.sum > it.limit.MaxCost() {
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
		// the sum of the costs (a store takes a key and limit once per batch). The
		// namings of one key and limit share its rule, so they are all enforced.
		reqs := make([]sluice.Request, 0, len(enforced))
		for _, i := range enforced {
			if it := &items[i]; it.first == i {
				it.req = len(reqs)
				reqs = append(reqs, sluice.Request{Key: it.key, Limit: it.limit, N: it.sum})
			}
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
			// The first item's sum counts down to the cost of the namings still to come.
			for _, i := range enforced {
				it := &items[i]
				f := &items[it.first]
				d := ds[f.req]
				f.sum -= it.n
				if d.Allowed {
					d.Remaining += f.sum
				} else if d.RetryAfter > 0 && reqs[f.req].N-f.sum <= d.Remaining {
					d.RetryAfter = 0
				}
				it.set(d)
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
