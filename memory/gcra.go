package memory

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// GCRA keeps one word per key (the TAT), which lets a decision on an existing key skip the
// shard lock: it finds the slot with atomic loads and updates the TAT with one
// compare-and-swap, so the only cache line it writes is the slot's own. Two cores deciding
// unrelated keys then never write a shared line, and a hot key costs one line transfer per
// decision instead of two (the lock's and the slot's).
//
// The shard lock still serialises everything that changes the table's shape (inserts,
// deletions, rebuilds) and the multi-limit and reservation paths. The rules that make the
// lock-free path safe:
//
//   - A slot's key is written once, before its meta word is published; a slot with a
//     non-zero meta never changes key for the life of its array. Deleting a key turns its
//     state into tombstone (a negative sentinel) and the slot is not reused until the
//     table is rebuilt into a fresh array, so a reader can never CAS another key's state
//     (no ABA).
//   - A rebuild swaps every old slot's state to tombstone as it copies it, so a reader still
//     on the old array fails its CAS, sees the sentinel and retries under the lock.
//   - A multi-limit batch freezes the slots it reads (state = frozen) until it commits or
//     gives up, so no lock-free decision can slip in between its evaluation and its commit.
//   - A reader that misses, or meets a sentinel, falls back to the locked path, which is
//     authoritative. TATs are epoch microseconds, never negative, so they never look like
//     a sentinel.
const (
	tombstone = -1 << 63
	frozen    = tombstone + 1
)

type gslot struct {
	key  atomic.Pointer[byte]
	meta atomic.Uint64 // len(key)<<32 | tag; 0 for a slot never used
	tat  atomic.Int64
}

// garray is one immutable-shape generation of a GCRA shard's table. used counts slots with
// a key (live or tombstone); live counts those with a state.
type garray struct {
	slots      []gslot
	used, live int
}

type gshard struct {
	mu     sync.Mutex
	arr    atomic.Pointer[garray]
	cursor int
	frozen []frozenSlot // slots a multi-limit batch holds, restored by unlock
	_      [64 - 8 - 8 - 8 - 24]byte
}

type frozenSlot struct {
	i   int
	tat int64
}

type gcraClass struct {
	st     *Store
	cid    int
	p      algo.Params
	mask   uint64
	shards []gshard
}

func newGCRAClass(st *Store, p algo.Params, id int) *gcraClass {
	return &gcraClass{st: st, cid: id, p: p, mask: uint64(st.shards - 1), shards: make([]gshard, st.shards)}
}

func (g *gcraClass) id() int                 { return g.cid }
func (g *gcraClass) maxCost() int64          { return g.p.MaxCost() }
func (g *gcraClass) shardIndex(h uint64) int { return int((h >> 32) & g.mask) }
func (g *gcraClass) lock(h uint64)           { g.shards[g.shardIndex(h)].mu.Lock() }

// unlock restores the slots a batch froze but did not commit, then releases the lock.
func (g *gcraClass) unlock(h uint64) {
	sh := &g.shards[g.shardIndex(h)]
	if len(sh.frozen) > 0 {
		a := sh.arr.Load()
		for _, f := range sh.frozen {
			a.slots[f.i].tat.Store(f.tat)
		}
		sh.frozen = sh.frozen[:0]
	}
	sh.mu.Unlock()
}

func gmeta(key string, h uint64) uint64 { return uint64(len(key))<<32 | h>>32 }

// find returns the index of key's live (or frozen) slot in a, or -1. It needs no lock.
func (a *garray) find(key string, h uint64) int {
	c := len(a.slots)
	if c == 0 {
		return -1
	}
	want := gmeta(key, h)
	for i := home(h, c); ; {
		e := &a.slots[i]
		m := e.meta.Load()
		if m == 0 {
			return -1
		}
		if m == want && e.tat.Load() != tombstone && unsafe.String(e.key.Load(), len(key)) == key {
			return i
		}
		if i++; i == c {
			i = 0
		}
	}
}

func (g *gcraClass) decide(key string, h uint64, now, n int64) algo.Result {
	sh := &g.shards[g.shardIndex(h)]
	if a := sh.arr.Load(); a != nil {
		if i := a.find(key, h); i >= 0 {
			e := &a.slots[i].tat
			for {
				old := e.Load()
				if old < 0 {
					break // deleted, moved or held by a batch: take the lock
				}
				ns, r := algo.GCRA(algo.State{A: old}, now, g.p, n)
				if ns.A == old || e.CompareAndSwap(old, ns.A) {
					return r
				}
			}
		}
	}
	sh.mu.Lock()
	r := g.decideIn(sh, key, h, now, n, true)
	sh.mu.Unlock()
	return r
}

func (g *gcraClass) decideLocked(key string, h uint64, now, n int64, commit bool) algo.Result {
	return g.decideIn(&g.shards[g.shardIndex(h)], key, h, now, n, commit)
}

// decideIn decides with the shard lock held. commit=false is a batch's evaluation: it
// freezes the slot until the batch commits or unlocks.
func (g *gcraClass) decideIn(sh *gshard, key string, h uint64, now, n int64, commit bool) algo.Result {
	a := sh.arr.Load()
	i := -1
	if a != nil {
		i = a.find(key, h)
	}
	if i < 0 {
		ns, r := algo.GCRA(algo.State{}, now, g.p, n)
		if commit && r.Allowed && n > 0 {
			g.insert(sh, key, h, ns.A, now)
		}
		return r
	}
	e := &a.slots[i].tat
	for k, f := range sh.frozen {
		if f.i == i { // held by this batch
			ns, r := algo.GCRA(algo.State{A: f.tat}, now, g.p, n)
			if commit {
				e.Store(ns.A)
				sh.frozen = append(sh.frozen[:k], sh.frozen[k+1:]...)
			}
			return r
		}
	}
	if !commit {
		old := e.Swap(frozen)
		sh.frozen = append(sh.frozen, frozenSlot{i, old})
		_, r := algo.GCRA(algo.State{A: old}, now, g.p, n)
		return r
	}
	for { // lock-free deciders may still race on this slot
		old := e.Load()
		ns, r := algo.GCRA(algo.State{A: old}, now, g.p, n)
		if ns.A == old || e.CompareAndSwap(old, ns.A) {
			return r
		}
	}
}

// update implements updater (reservations) with the shard lock held.
func (g *gcraClass) update(key string, h uint64, now int64, f func(algo.State, int64) (algo.State, bool)) {
	sh := &g.shards[g.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.arr.Load()
	i := -1
	if a != nil {
		i = a.find(key, h)
	}
	if i < 0 {
		if next, write := f(algo.State{}, now); write {
			g.insert(sh, key, h, next.A, now)
		}
		return
	}
	e := &a.slots[i].tat
	for {
		old := e.Load()
		next, write := f(algo.State{A: old}, now)
		if !write || e.CompareAndSwap(old, next.A) {
			return
		}
	}
}

// insert adds a key known to be absent, with the lock held: it drops expired state first,
// rebuilds the array when tombstones and growth call for it, evicts under MaxKeys, and
// publishes the slot's meta last.
func (g *gcraClass) insert(sh *gshard, key string, h uint64, tat, now int64) {
	full := func(a *garray) bool { return a == nil || (a.used+1)*gMaxLoadDen > len(a.slots)*gMaxLoadNum }
	a := sh.arr.Load()
	if full(a) && a != nil && g.st.sweepGap > 0 {
		g.st.sweepTime(now)
		g.sweepShard(sh, now, len(a.slots)) // may rebuild
		a = sh.arr.Load()
	}
	if full(a) {
		a = g.rebuild(sh)
	}
	if max := g.st.maxKeys; max > 0 && g.st.keys.Load() >= max && a.live > 0 {
		g.evictNear(a, h)
	}
	c := len(a.slots)
	i := home(h, c)
	for a.slots[i].meta.Load() != 0 {
		if i++; i == c {
			i = 0
		}
	}
	e := &a.slots[i]
	e.key.Store(unsafe.StringData(key))
	e.tat.Store(tat)
	e.meta.Store(gmeta(key, h))
	a.used++
	a.live++
	g.st.keys.Add(1)
}

// GCRA's arrays are fuller than 51% and at most 70% full (slots in use, tombstones
// included). A lookup walks about 1.5–2.2 slots of 24 bytes on average (linear probing),
// and a slot costs 34–47 bytes per key. At 80% a lookup walked up to 3 slots, often into a
// second cache line: at 1M keys, 8% of the time per decision.
const (
	gMaxLoadNum, gMaxLoadDen   = 7, 10  // rebuild above 70% full
	gGrowLoadNum, gGrowLoadDen = 17, 25 // grow when the live keys fill more than 68%
)

// rebuild copies the live slots into a fresh array sized for them (growing by a third when
// more than 68% would be live, which leaves it at least 51% full; shrinking when less than
// a fifth; otherwise only dropping tombstones), tombstoning each old slot as it goes so
// that lock-free readers of the old array retry under the lock.
func (g *gcraClass) rebuild(sh *gshard) *garray {
	old := sh.arr.Load()
	live, size := 0, minCap
	if old != nil {
		live, size = old.live, len(old.slots)
		switch {
		case (live+1)*gGrowLoadDen > size*gGrowLoadNum:
			size = size + size/3 + 1
		case size > 64 && live*5 < size:
			size = live*5/3 + 1
		}
	}
	a := &garray{slots: make([]gslot, max(size, minCap))}
	c := len(a.slots)
	if old != nil {
		for k := range old.slots {
			e := &old.slots[k]
			if e.meta.Load() == 0 {
				continue
			}
			v := e.tat.Swap(tombstone)
			if v == tombstone {
				continue
			}
			ptr := e.key.Load()
			m := e.meta.Load()
			i := home(g.st.hash(unsafe.String(ptr, int(m>>32))), c)
			for a.slots[i].meta.Load() != 0 {
				if i++; i == c {
					i = 0
				}
			}
			if v == frozen { // held by a batch in progress: it restores by index
				for f := range sh.frozen {
					if sh.frozen[f].i == k {
						sh.frozen[f].i = i
					}
				}
			}
			d := &a.slots[i]
			d.key.Store(ptr)
			d.tat.Store(v)
			d.meta.Store(m)
			a.used++
			a.live++
		}
	}
	sh.arr.Store(a)
	return a
}

// kill tombstones slot i if it is still live, with the lock held.
func (g *gcraClass) kill(a *garray, i int) {
	if a.slots[i].tat.Swap(tombstone) != tombstone {
		a.live--
		g.st.keys.Add(-1)
	}
}

// evictNear tombstones, among the first 8 live entries at or after h's home position, the
// one closest to empty (earliest TAT).
func (g *gcraClass) evictNear(a *garray, h uint64) {
	c := len(a.slots)
	victim, best := -1, int64(0)
	for i, seen, probed := home(h, c), 0, 0; seen < 8 && probed < c; probed++ {
		if v := a.slots[i].tat.Load(); a.slots[i].meta.Load() != 0 && v >= 0 {
			if victim < 0 || v < best {
				victim, best = i, v
			}
			seen++
		}
		if i++; i == c {
			i = 0
		}
	}
	if victim >= 0 {
		g.kill(a, victim)
	}
}

func (g *gcraClass) reset(key string, h uint64) {
	sh := &g.shards[g.shardIndex(h)]
	sh.mu.Lock()
	if a := sh.arr.Load(); a != nil {
		if i := a.find(key, h); i >= 0 {
			g.kill(a, i)
		}
	}
	sh.mu.Unlock()
}

func (g *gcraClass) sweep(now int64) {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		if a := sh.arr.Load(); a != nil {
			g.sweepShard(sh, now, max(64, len(a.slots)/8))
		}
		sh.mu.Unlock()
	}
}

// sweepShard tombstones expired state (TAT ≤ now) in up to budget slots from the cursor,
// with the lock held, and rebuilds the array once tombstones outnumber live keys (or it
// has emptied out).
func (g *gcraClass) sweepShard(sh *gshard, now int64, budget int) {
	a := sh.arr.Load()
	c := len(a.slots)
	i := sh.cursor % c
	for ; budget > 0; budget-- {
		e := &a.slots[i]
		if e.meta.Load() != 0 {
			if v := e.tat.Load(); v >= 0 && v <= now && e.tat.CompareAndSwap(v, tombstone) {
				a.live--
				g.st.keys.Add(-1)
			}
		}
		if i++; i == c {
			i = 0
		}
	}
	sh.cursor = i
	if dead := a.used - a.live; dead > a.live || (c > 64 && a.live*5 < c) {
		g.rebuild(sh)
	}
}
