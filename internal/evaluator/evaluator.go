// Package evaluator decides the layered limits of one request — several policies, a
// policy's tier or override and its route limits, the matched Envoy descriptors — all or
// nothing, for both front ends: package httplimit and package server.
//
// A request is a slice of Items, each a sluice.Request (key, limit, cost, policy, shadow,
// failure mode) and how it was found. Evaluate decides it:
//
//   - Every key longer than keys.MaxStoreKeyLen is replaced by its keys.Bound form before
//     anything else, so an over-long identity never makes the call an error.
//   - A limit named more than once (Envoy sends a descriptor twice when two of a route's
//     actions produce it) is one request to the store for the sum of its costs, and each
//     naming reports the quota left after it and the namings before it.
//   - A Blocked item (requests_per_unit 0) and a limit whose summed cost exceeds what it
//     can ever allow are over without asking the store: the request is denied and spends
//     nothing.
//   - Otherwise the enforced items are decided in one Decide call: all or nothing.
//   - Shadow items are decided only after, each in a call of its own: spent when the
//     request passed, looked at (cost 0) when it was denied. They never block, and their
//     errors are reported, never returned.
//   - Enforced items left undecided by a denial made before any store call are looked at
//     (cost 0), in one call, so that every item reports its state.
package evaluator

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
)

// Item is one limit of a request. The caller fills the Request and Blocked/Skip;
// Evaluate fills the rest, and replaces Key by its keys.Bound form.
type Item struct {
	sluice.Request
	// Skip marks an item that names no limit (no rule matched, or the rule is unlimited):
	// it is never asked of the store and never over.
	Skip bool
	// Blocked marks a limit that is over without asking the store (requests_per_unit 0).
	Blocked bool

	// Decision is the store's decision, when Decided.
	Decision sluice.Decision
	Decided  bool
	// TooBig reports that the item's cost (with the namings of its key and limit before
	// it) exceeds what its limit can ever allow: it is over without spending.
	TooBig bool

	// first is the index of the request's first asked item naming the same key and limit
	// (the item itself when none before it does), and sum, on that first item, the cost
	// of all those namings; req is the first item's index in the enforced call.
	first, req int
	sum        int64
}

// asked reports whether the item is a limit the store decides.
func (it *Item) asked() bool { return !it.Skip && !it.Blocked }

// Over reports whether the item is over its limit: denied by the store with a wait, an
// impossible cost, or Blocked. Shadow items can be over too; they never block.
func (it *Item) Over() bool {
	switch {
	case it.Skip:
		return false
	case it.Blocked:
		return true
	}
	return it.TooBig || (it.Decided && !it.Decision.Allowed && it.Decision.RetryAfter > 0)
}

// Blocks reports whether the item denies the request.
func (it *Item) Blocks() bool { return !it.Shadow && it.Over() }

// Outcome is what Evaluate decided for a request.
type Outcome struct {
	// Allowed reports whether no enforced item is over its limit.
	Allowed bool
	// RetryAfter is, for a denied request, the longest wait among the items that block it.
	RetryAfter time.Duration
	// Report is the enforced call's report (the zero Report when none was made).
	Report sluice.Report
	// Path is how the enforced call's decisions were reached (PathStore when no call
	// was made, or the call failed without decisions).
	Path sluice.Path
	// ShadowErrors are the errors of shadow items (each a *ShadowError), which never
	// affect the answer.
	ShadowErrors []error
}

// ShadowError is the error of a shadow item, reported in Outcome.ShadowErrors.
type ShadowError struct {
	// Index is the item's index in the request, so the caller can say which one failed.
	Index  int
	Policy string
	Err    error
}

func (e *ShadowError) Error() string { return fmt.Sprintf("shadow limit %q: %v", e.Policy, e.Err) }
func (e *ShadowError) Unwrap() error { return e.Err }

// Evaluate decides the items of one request with lim (see the package doc), reaching each
// through item. It returns an error only for the enforced call: bad input, or a store
// failure the limiter did not absorb.
func Evaluate[T any](ctx context.Context, lim sluice.Limiter, items []T, item func(*T) *Item) (Outcome, error) {
	if len(items) == 1 {
		// The common request, one enforced limit, without the bookkeeping of several
		// (TestEvaluateOne holds it to evaluate).
		if it := item(&items[0]); it.asked() && !it.Shadow && !it.Decided {
			it.Key = keys.Bound(it.Key)
			if it.N <= it.Limit.MaxCost() {
				return enforceOne(ctx, lim, it)
			}
		}
	}
	return evaluate(ctx, lim, items, item)
}

// evaluate is Evaluate for any request.
func evaluate[T any](ctx context.Context, lim sluice.Limiter, items []T, item func(*T) *Item) (Outcome, error) {
	out := Outcome{Allowed: true}
	n := len(items)
	at := func(i int) *Item { return item(&items[i]) }
	prepare(n, at)
	for i := range n {
		if at(i).Blocks() {
			out.Allowed = false // a blocked rule or an impossible cost: spend nothing
		}
	}
	if out.Allowed {
		allowed, rep, err := enforce(ctx, lim, n, at)
		out.Report = rep
		for i := range n {
			if it := at(i); it.asked() && !it.Shadow && it.Decided {
				out.Path = it.Decision.Path
				break
			}
		}
		if err != nil {
			out.Allowed = false
			return out, err
		}
		out.Allowed = allowed
	}
	// What is left undecided: enforced items of a request denied before the store was
	// asked (looked at, together), and shadow items (each on its own).
	var looks []sluice.Request
	var lookAt []int
	for i := range n {
		it := at(i)
		if !it.asked() || it.Decided || it.Shadow || it.first != i {
			continue
		}
		r := it.Request
		r.N = 0
		looks = append(looks, r)
		lookAt = append(lookAt, i)
	}
	if len(looks) > 0 {
		ds := make([]sluice.Decision, len(looks))
		if _, err := lim.Decide(ctx, looks, ds); err != nil {
			return out, err
		}
		for j, i := range lookAt {
			for k := i; k < n; k++ { // i and the later namings of its key and limit
				if o := at(k); o.asked() && !o.Shadow && o.first == i {
					o.set(ds[j])
				}
			}
		}
	}
	for i := range n {
		it := at(i)
		if !it.asked() || it.Decided || !it.Shadow {
			continue
		}
		r := it.Request
		if !out.Allowed || it.TooBig {
			r.N = 0
		}
		b := buffers.Get().(*buffer)
		b.reqs = append(b.reqs[:0], r)
		ds := b.decisions(1)
		_, err := lim.Decide(ctx, b.reqs, ds)
		d := ds[0]
		b.put()
		if err != nil {
			out.ShadowErrors = append(out.ShadowErrors, &ShadowError{Index: i, Policy: it.Policy, Err: err})
			continue
		}
		it.set(d)
	}
	if !out.Allowed {
		for i := range n {
			if it := at(i); it.Blocks() && it.Decided {
				out.RetryAfter = max(out.RetryAfter, it.Decision.RetryAfter)
			}
		}
	}
	return out, nil
}

// prepare marks the items whose cost can never be allowed: an item is judged by the cost
// of its key and limit up to and including it. It also sets first and sum.
func prepare(n int, at func(int) *Item) {
	type ident struct {
		key   string
		limit sluice.Limit
	}
	var index map[ident]int // for requests of many items; a scan back serves the rest
	for i := range n {
		it := at(i)
		it.TooBig, it.sum = false, 0
		if !it.asked() {
			continue
		}
		it.Key = keys.Bound(it.Key)
		it.first = i
		if n <= 8 {
			for j := range i {
				if o := at(j); o.asked() && o.first == j && o.Key == it.Key && o.Limit == it.Limit {
					it.first = j
					break
				}
			}
		} else {
			if index == nil {
				index = make(map[ident]int, n)
			}
			id := ident{it.Key, it.Limit}
			if j, ok := index[id]; ok {
				it.first = j
			} else {
				index[id] = i
			}
		}
		f := at(it.first)
		f.sum = addCost(f.sum, it.N) // it.sum is 0 when f is it
		if f.sum > it.Limit.MaxCost() {
			it.TooBig = true
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

// enforce decides the enforced asked items, in one all-or-nothing call of one request
// per key and limit (a limit named twice is one request for the sum of its costs; the
// namings of one key and limit share their rule, so they are all enforced).
func enforce(ctx context.Context, lim sluice.Limiter, n int, at func(int) *Item) (bool, sluice.Report, error) {
	b := buffers.Get().(*buffer)
	defer b.put()
	reqs := b.reqs[:0]
	for i := range n {
		if it := at(i); it.asked() && !it.Shadow && it.first == i {
			it.req = len(reqs)
			r := it.Request
			r.N = it.sum
			reqs = append(reqs, r)
		}
	}
	b.reqs = reqs
	if len(reqs) == 0 {
		return true, sluice.Report{}, nil
	}
	ds := b.decisions(len(reqs))
	rep, err := lim.Decide(ctx, reqs, ds)
	if err != nil && ds[0].Path != sluice.PathClosed {
		return false, rep, err
	}
	allowed := err == nil
	for _, d := range ds {
		allowed = allowed && d.Allowed
	}
	// Each item reports its request's decision as if its namings were spent one after
	// the other: Remaining after it and the namings before it, and, in a denied call,
	// RetryAfter 0 (it alone would pass) while that spending fits. The first item's sum
	// counts down to the cost of the namings still to come.
	for i := range n {
		it := at(i)
		if !it.asked() || it.Shadow {
			continue
		}
		f := at(it.first)
		d := ds[f.req]
		f.sum -= it.N
		if d.Allowed {
			d.Remaining += f.sum
		} else {
			passAlone(&d, reqs[f.req].N-f.sum)
		}
		it.set(d)
	}
	return allowed, rep, err
}

// passAlone sets RetryAfter 0 in d, a denial in an all-or-nothing call, when spent units
// of it would have passed alone: it is not what made the call fail. A failed-closed
// denial (the store did not decide) keeps its RetryAfter.
func passAlone(d *sluice.Decision, spent int64) {
	if d.RetryAfter > 0 && spent <= d.Remaining && d.Path != sluice.PathClosed {
		d.RetryAfter = 0
	}
}

// enforceOne is evaluate for a request of one item, it, that is asked, enforced, not yet
// decided and within its limit's MaxCost, its key bound. The store decides it.Request
// into it.Decision, in place: no layer writes reqs, and none keeps reqs or ds after
// Decide returns, as with a buffer's.
func enforceOne(ctx context.Context, lim sluice.Limiter, it *Item) (Outcome, error) {
	it.TooBig, it.first, it.req, it.sum = false, 0, 0, 0
	it.Decision = sluice.Decision{}
	rep, err := lim.Decide(ctx, unsafe.Slice(&it.Request, 1), unsafe.Slice(&it.Decision, 1))
	out := Outcome{Report: rep}
	d := &it.Decision
	if err != nil && d.Path != sluice.PathClosed {
		*d = sluice.Decision{} // as evaluate: an undecided item keeps no decision
		return out, err
	}
	if !d.Allowed {
		passAlone(d, it.N)
	}
	it.set(*d)
	out.Path = d.Path
	if err != nil {
		return out, err
	}
	out.Allowed = d.Allowed
	if !out.Allowed && d.RetryAfter > 0 {
		out.RetryAfter = d.RetryAfter
	}
	return out, nil
}

// buffer holds the slices of one enforced call, reused across requests (slices on the
// stack would escape through the limiter interface). No layer keeps them after Decide
// returns.
type buffer struct {
	reqs []sluice.Request
	ds   []sluice.Decision
}

var buffers = sync.Pool{New: func() any { return new(buffer) }}

func (b *buffer) decisions(n int) []sluice.Decision {
	if cap(b.ds) < n {
		b.ds = make([]sluice.Decision, n)
	}
	b.ds = b.ds[:n]
	clear(b.ds)
	return b.ds
}

func (b *buffer) put() {
	clear(b.reqs) // drop the keys' strings
	b.reqs = b.reqs[:0]
	if cap(b.reqs) > 64 || cap(b.ds) > 64 {
		return // a huge request: let it go
	}
	buffers.Put(b)
}

func (it *Item) set(d sluice.Decision) {
	if d.Limit == (sluice.Limit{}) {
		d.Limit = it.Limit
	}
	it.Decision, it.Decided = d, true
}
