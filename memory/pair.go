package memory

import (
	"runtime"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/algo"
)

// pslot is the slot of a two-word state, A and B of algo.State: FixedWindow's, and the
// bucket machine's when Rate does not divide Period. It too is decided without the shard
// lock (lockfree.go); two words cannot be swapped together, so the slot has its own lock:
//
//   - The control word holds B with the slot's generation, or a sentinel: tombstone or
//     frozen (lockfree.go), or busy.
//   - A decision takes the slot by swapping B for busy, reads A, and releases it by
//     storing the new A and then the new B. Only the slot's holder touches A: a decider
//     that set busy, or the shard lock's holder, which sets tombstone or frozen only after
//     any busy has cleared.
//   - A decider that meets busy spins briefly, then yields (runtime.Gosched), so a
//     preempted holder runs even with GOMAXPROCS=1; a holder calls nothing that blocks.
//   - A decider that meets tombstone or frozen, or another generation than the meta it
//     matched (it releases the slot unchanged), takes the shard lock.
//
// Arrays are rebuilt above 80% full and grow above 75% live.
type pslot struct {
	lhdr // ctl holds State.B
	// a is State.A, a plain word: the compare-and-swap that takes the slot observes the
	// store that released it, which orders every access to a.
	a int64
}

// acquire takes the slot for its caller, returning the state's B, or reports false when
// the slot is tombstoned or frozen. It waits out another holder.
func (e *pslot) acquire() (int64, bool) { return e.claim(busy, false) }

func (e *pslot) seize(v int64) (algo.State, int64) {
	b, _ := e.claim(v, true)
	if isSentinel(b) {
		return algo.State{A: e.a, B: b}, b
	}
	return algo.State{A: e.a, B: b & valMask}, b
}

// claim waits out a holder, then swaps the control word for v and returns the word it
// replaced; over tombstone or frozen it swaps only if sentinels is set, else reports false.
func (e *pslot) claim(v int64, sentinels bool) (int64, bool) {
	for spins := 0; ; spins++ {
		b := e.ctl.Load()
		switch {
		case b == busy:
			if spins >= 16 {
				runtime.Gosched()
			}
			continue
		case isSentinel(b) && !sentinels:
			return b, false
		}
		if e.ctl.CompareAndSwap(b, v) {
			return b, true
		}
	}
}

func (e *pslot) put(s algo.State) {
	e.a = s.A
	e.ctl.Store(pack(e.meta.Load(), s.B))
}

func (e *pslot) peek() (algo.State, bool) {
	b, ok := e.acquire()
	if !ok {
		return algo.State{}, false
	}
	s := algo.State{A: e.a, B: b & valMask}
	e.ctl.Store(b)
	return s, true
}

func (e *pslot) retire(now int64, p algo.Params) bool {
	b, ok := e.acquire()
	if !ok {
		return false
	}
	if algo.ExpiresAt(algo.State{A: e.a, B: b & valMask}, p) <= now {
		e.ctl.Store(tombstone)
		return true
	}
	e.ctl.Store(b)
	return false
}

func (e *pslot) apply(now int64, p algo.Params, n int64, f algoFunc) algo.Result {
	b, _ := e.acquire() // live: the caller holds the shard lock and found it so
	ns, r := f(algo.State{A: e.a, B: b & valMask}, now, p, n)
	e.a = ns.A
	e.ctl.Store(b&genMask | ns.B)
	return r
}

type pairClass struct {
	lockFree[pslot, *pslot]
}

func newPairClass(st *Store, p algo.Params, id int, gone *atomic.Bool, f algoFunc) *pairClass {
	g := new(pairClass)
	g.init(st, p, id, gone, f, 80, 75)
	return g
}

// decide takes only the key's slot for an existing key whose slot is live; otherwise it
// decides under the shard lock.
func (g *pairClass) decide(key string, h uint64, now, n int64) algo.Result {
	sh := g.shard(h)
	if a := sh.arr.Load(); a != nil {
		if i, m := a.find(key, h); i >= 0 {
			if r, ok := g.fast(&a.slots[i], m, now, n); ok {
				return r
			}
		}
	}
	return g.decideUnder(sh, key, h, now, n)
}

// fast decides on slot e, which find matched with meta m, holding only the slot, as
// gcraClass.fast does.
func (g *pairClass) fast(e *pslot, m uint64, now, n int64) (algo.Result, bool) {
	b, ok := e.acquire()
	if !ok {
		return algo.Result{}, false
	}
	if !sameGen(b, m) {
		e.ctl.Store(b) // another key's: released unchanged
		return algo.Result{}, false
	}
	old := algo.State{A: e.a, B: b & valMask}
	ns, r := g.f(old, now, g.p, n)
	if ns.A != old.A {
		e.a = ns.A
	}
	e.ctl.Store(b&genMask | ns.B)
	return r, true
}
