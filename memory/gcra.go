package memory

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/algo"
)

// A GCRA key's state is one word, its TAT, when the limit's Rate divides its Period (S = 1,
// algo.Params; otherwise the TAT has a part below 1µs and the class keeps two words in
// pair.go's slots). That word is kept in the slot's control word (lockfree.go),
// so a decision on an existing key takes no lock at all: it updates the TAT with one
// compare-and-swap, retrying if another core got there first. Slots are 24 bytes.
//
// TokenBucket and LeakyBucket limits with S = 1 use this class too, with the limit's GCRA
// Params: a token bucket full at time F, or a leaky bucket empty at F, is a TAT of F, and
// algo.TokenBucket's and algo.LeakyBucket's Result for every request is GCRA's
// (TestTokenBucketIsGCRA, TestLeakyBucketIsGCRA), as are LeakyBucket's reservations
// (TestReserveLeakyBucketIsReserveGCRA), so the store keeps the one word instead of the
// bucket's two.
//
// Arrays are rebuilt above 70% full (slots in use, tombstones included) and grow when
// more than 68% of the slots would be live, so they are 51–70% full. A lookup walks about
// 1.5–2.2 slots on average (linear probing), and a slot costs 34–47 bytes per key. At 80%
// a lookup walked up to 3 slots, often into a second cache line: at 1M keys, 8% of the
// time per decision.
type gslot struct{ lhdr }

func (e *gslot) seize(v int64) (algo.State, int64) {
	old := e.ctl.Swap(v)
	if isSentinel(old) {
		return algo.State{A: old}, old
	}
	return algo.State{A: old & valMask}, old
}

func (e *gslot) put(s algo.State) { e.ctl.Store(pack(e.meta.Load(), s.A)) }

func (e *gslot) peek() (algo.State, bool) {
	v := e.ctl.Load()
	return algo.State{A: v & valMask}, !isSentinel(v)
}

func (e *gslot) retire(now int64, p algo.Params) bool {
	v := e.ctl.Load()
	return !isSentinel(v) && algo.ExpiresAt(algo.State{A: v & valMask}, p) <= now && e.ctl.CompareAndSwap(v, tombstone)
}

func (e *gslot) apply(now int64, p algo.Params, n int64, f algoFunc) algo.Result {
	for {
		old := e.ctl.Load()
		ns, r := f(algo.State{A: old & valMask}, now, p, n)
		if ns.A == old&valMask || e.ctl.CompareAndSwap(old, old&genMask|ns.A) {
			return r
		}
	}
}

func (e *gslot) change(now int64, f func(algo.State, int64) (algo.State, bool)) {
	for {
		old := e.ctl.Load()
		next, write := f(algo.State{A: old & valMask}, now)
		if !write || e.ctl.CompareAndSwap(old, old&genMask|next.A) {
			return
		}
	}
}

type gcraClass struct {
	lockFree[gslot, *gslot]
}

func newGCRAClass(st *Store, p algo.Params, id int, gone *atomic.Bool) *gcraClass {
	g := new(gcraClass)
	g.init(st, p, id, gone, algo.GCRA, 70, 68)
	return g
}

// decide takes no lock for an existing key whose slot is live; otherwise it decides under
// the shard lock.
func (g *gcraClass) decide(key string, h uint64, now, n int64) algo.Result {
	sh := g.shard(h)
	if a := sh.arr.Load(); a != nil {
		if i, m := a.find(key, h); i >= 0 {
			if r, ok := g.fast(&a.slots[i].ctl, m, now, n); ok {
				return r
			}
		}
	}
	sh.mu.Lock()
	r := g.decideIn(sh, key, h, now, n, true)
	sh.mu.Unlock()
	return r
}

// fast decides on control word e of a slot that find matched with meta m, without the
// lock. It reports false, having written nothing, if the slot is deleted, moved, held by
// a batch, or given to another key since (a generation other than m's).
func (g *gcraClass) fast(e *atomic.Int64, m uint64, now, n int64) (algo.Result, bool) {
	for {
		old := e.Load()
		if isSentinel(old) || !sameGen(old, m) {
			return algo.Result{}, false
		}
		tat := old & valMask
		if n > 0 {
			// Only the admission between the load and the swap: under contention on one
			// key a shorter window fails fewer swaps. The results come after.
			if next, ok := algo.GCRAStep(tat, now, g.p, n); ok {
				if e.CompareAndSwap(old, old&genMask|next) {
					return algo.GCRAAllowed(next, now, g.p), true
				}
				continue
			}
		}
		_, r := algo.GCRA(algo.State{A: tat}, now, g.p, n) // a look or a denial writes nothing
		return r, true
	}
}
