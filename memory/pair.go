package memory

import (
	"runtime"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/algo"
)

// FixedWindow (window start, count), and the bucket machine (algo.GCRA, for GCRA,
// TokenBucket and LeakyBucket limits) when Rate does not divide Period (its TAT and the
// part of a µs below it), keep two words, A and B of algo.State. Like the one-word TAT
// (gcra.go, lockfree.go)
// they decide an existing key without the shard lock, so a decision writes only the key's
// own slot; two words cannot be swapped together, so the slot carries its own tiny lock:
//
//   - The control word holds B (a time or a count, never near the sentinels) with the
//     slot's generation, or a sentinel: tombstone or frozen (lockfree.go), or busy.
//   - A decision takes the slot by swapping B for busy (compare-and-swap), reads A, and
//     releases the slot by storing the new A and then the new B. A is read or written only
//     by whoever holds the slot: a decider that set busy, or the shard lock's holder, which
//     replaces a control word with tombstone or frozen only after any busy has cleared.
//   - A decider that meets busy waits: a holder runs a few tens of nanoseconds of
//     arithmetic and stores, and calls nothing that can block. Waiting spins briefly and
//     then yields the processor (runtime.Gosched), so a holder that was preempted gets to
//     run even with GOMAXPROCS=1; the wait is then that of a preempted sync.Mutex holder,
//     which is what the shard lock costs in the same case.
//   - A decider that meets tombstone or frozen takes the shard lock, as does one that
//     took a slot of another generation than the meta it matched (it releases it
//     unchanged).
//
// Slots are 32 bytes. Arrays are rebuilt above 80% full and grow when live keys would fill
// more than 75%, so they stay 56–80% full (40–57 bytes per key): a 48-byte-per-key budget
// does not allow GCRA's 70% ceiling with slots a third larger.
type pslot struct {
	lhdr // ctl holds State.B
	// a is State.A. Only the slot's holder reads or writes it, so it is a plain word: the
	// compare-and-swap that takes the slot observes the control-word store that released
	// it, which orders every access to a (Go's memory model: an atomic operation that
	// observes another is synchronized after it). A plain store saves an atomic exchange
	// (XCHG on amd64) per decision.
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

// claim waits out a holder (spinning briefly, then yielding), then swaps the control word
// for v and returns the word it replaced; over tombstone or frozen it swaps only if
// sentinels is set, and otherwise reports false.
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

func (e *pslot) change(now int64, f func(algo.State, int64) (algo.State, bool)) {
	b, _ := e.acquire()
	s := algo.State{A: e.a, B: b & valMask}
	if next, write := f(s, now); write {
		s = next
	}
	e.a = s.A
	e.ctl.Store(b&genMask | s.B)
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
	sh.mu.Lock()
	r := g.decideIn(sh, key, h, now, n, true)
	sh.mu.Unlock()
	return r
}

// fast decides on slot e, which find matched with meta m, holding only the slot. It
// reports false, having written nothing, if the slot is deleted, moved, frozen by a
// batch, or given to another key since (a generation other than m's).
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
