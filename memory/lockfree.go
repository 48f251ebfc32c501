package memory

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// The lock-free classes (GCRA, and TokenBucket and LeakyBucket on GCRA's state, in
// gcra.go; the two-word states in pair.go) decide an existing key without the shard lock:
// a decision finds the slot with atomic loads and updates the state inside it, so the only
// cache line it writes is the slot's own. Two cores deciding unrelated keys then never write a shared line, and a hot
// key costs one line transfer per decision instead of two (the lock's and the slot's).
//
// Every slot begins with an lhdr: the key, its meta word, and a control word that holds
// the state's time-like word (GCRA's TAT, the two-word states' B) or a sentinel. The shard
// lock still serialises everything that changes the table's shape (inserts, deletions,
// rebuilds) and the multi-limit and reservation paths. The rules that make the lock-free
// path safe:
//
//   - A slot's key is written once, before its meta word is published; a slot with a
//     non-zero meta never changes key for the life of its array. Deleting a key turns its
//     control word into tombstone and the slot is not reused until the table is rebuilt
//     into a fresh array, so a decider can never update another key's state (no ABA).
//   - A rebuild seizes every old slot (control word = tombstone) as it copies it, so a
//     decider still on the old array fails, sees the sentinel and retries under the lock.
//   - A multi-limit batch freezes the slots it reads (control word = frozen) until it
//     commits or gives up, so no lock-free decision can slip in between its evaluation and
//     its commit.
//   - A decider that misses, or meets tombstone or frozen, falls back to the locked path,
//     which is authoritative.
//
// A state's control word is a time in epoch microseconds or a count, never within three
// of the most negative int64, so it never looks like a sentinel.
const (
	tombstone = -1 << 63
	frozen    = tombstone + 1
	busy      = tombstone + 2 // a two-word slot held by a decider (pair.go)
)

// isSentinel reports whether a control word holds a sentinel rather than state.
func isSentinel(v int64) bool { return v <= busy }

type lhdr struct {
	key  atomic.Pointer[byte]
	meta atomic.Uint64 // len(key)<<32 | tag; 0 for a slot never used
	ctl  atomic.Int64  // the state's time-like word, or a sentinel
}

// hdr is the header every slot type begins with (checked by TestSlotsBeginWithHeader).
// Reaching it by conversion rather than through a method keeps lookups free of indirect
// calls in the generic table code.
func hdr[S any](e *S) *lhdr { return (*lhdr)(unsafe.Pointer(e)) }

func gmeta(key string, h uint64) uint64 { return uint64(len(key))<<32 | h>>32 }

// cell is what the table needs of a slot type S beyond its header: how its state is read,
// written and retired under its concurrency rule. Every method is called with the shard
// lock held.
type cell[S any] interface {
	*S
	// seize sets the control word to v (tombstone or frozen), waiting out a decider that
	// holds the slot, and returns the state it displaced and that state's control word,
	// which may itself be tombstone or frozen (the state then holds the sentinel too).
	seize(v int64) (s algo.State, was int64)
	// put stores s, the control word last, publishing and releasing the slot.
	put(s algo.State)
	// peek returns the state of a live slot, or false for a sentinel.
	peek() (algo.State, bool)
	// retire tombstones a live slot whose state is equivalent to empty as of now (with
	// ExpiresAt under p), reporting whether it did.
	retire(now int64, p algo.Params) bool
	// apply runs f on a live slot's state and stores what it returns.
	apply(now int64, p algo.Params, n int64, f algoFunc) algo.Result
	// change runs f on a live slot's state and stores its result when it says so.
	change(now int64, f func(algo.State, int64) (algo.State, bool))
}

type algoFunc = func(algo.State, int64, algo.Params, int64) (algo.State, algo.Result)

// larray is one immutable-shape generation of a shard's table. used counts slots with a
// key (live or tombstone); live counts those with a state.
type larray[S any] struct {
	slots      []S
	used, live int
}

type lshard[S any] struct {
	mu     sync.Mutex
	arr    atomic.Pointer[larray[S]]
	cursor int
	frozen []frozenSlot // slots a multi-limit batch holds, restored by unlock
	_      [64 - 8 - 8 - 8 - 24]byte
}

type frozenSlot struct {
	i int
	s algo.State
}

// lockFree is the shards of one class and every path that takes their locks. The hot,
// lock-free decide is the slot type's own (gcraClass.decide, pairClass.decide).
type lockFree[S any, P cell[S]] struct {
	st     *Store
	cid    int
	p      algo.Params
	f      algoFunc
	mask   uint64
	shards []lshard[S]
	// maxLoad and growLoad, in hundredths: rebuild above maxLoad% used, growing when more
	// than growLoad% would be live.
	maxLoad, growLoad int
	gone              *atomic.Bool // retired: see class.retire
}

func (g *lockFree[S, P]) init(st *Store, p algo.Params, id int, gone *atomic.Bool, f algoFunc, maxLoad, growLoad int) {
	*g = lockFree[S, P]{st: st, cid: id, p: p, f: f, mask: uint64(st.shards - 1),
		shards: make([]lshard[S], st.shards), maxLoad: maxLoad, growLoad: growLoad, gone: gone}
}

func (g *lockFree[S, P]) id() int                 { return g.cid }
func (g *lockFree[S, P]) params() algo.Params     { return g.p }
func (g *lockFree[S, P]) maxCost() int64          { return g.p.MaxCost() }
func (g *lockFree[S, P]) shardIndex(h uint64) int { return int((h >> 32) & g.mask) }
func (g *lockFree[S, P]) shard(h uint64) *lshard[S] {
	return &g.shards[(h>>32)&g.mask]
}
func (g *lockFree[S, P]) lock(h uint64) { g.shard(h).mu.Lock() }

// unlock restores the slots a batch froze but did not commit, then releases the lock.
func (g *lockFree[S, P]) unlock(h uint64) {
	sh := g.shard(h)
	if len(sh.frozen) > 0 {
		a := sh.arr.Load()
		for _, f := range sh.frozen {
			P(&a.slots[f.i]).put(f.s)
		}
		sh.frozen = sh.frozen[:0]
	}
	sh.mu.Unlock()
}

// find returns the index of key's slot in a (live, frozen or held), or -1. It needs no
// lock.
func (a *larray[S]) find(key string, h uint64) int {
	c := len(a.slots)
	if c == 0 {
		return -1
	}
	want := gmeta(key, h)
	for i := home(h, c); ; {
		e := hdr(&a.slots[i])
		m := e.meta.Load()
		if m == 0 {
			return -1
		}
		if m == want && e.ctl.Load() != tombstone && unsafe.String(e.key.Load(), len(key)) == key {
			return i
		}
		if i++; i == c {
			i = 0
		}
	}
}

// free returns the index of the first never-used slot at or after h's home position.
func (a *larray[S]) free(h uint64) int {
	c := len(a.slots)
	i := home(h, c)
	for hdr(&a.slots[i]).meta.Load() != 0 {
		if i++; i == c {
			i = 0
		}
	}
	return i
}

func (g *lockFree[S, P]) locate(sh *lshard[S], key string, h uint64) (*larray[S], int) {
	a := sh.arr.Load()
	if a == nil {
		return nil, -1
	}
	return a, a.find(key, h)
}

// decideLocked decides with the shard lock held; it spends only if commit.
func (g *lockFree[S, P]) decideLocked(key string, h uint64, now, n int64, commit bool) algo.Result {
	return g.decideIn(g.shard(h), key, h, now, n, commit)
}

// decideIn decides with the shard lock held. commit=false is a batch's evaluation: it
// freezes the slot until the batch commits or unlocks.
func (g *lockFree[S, P]) decideIn(sh *lshard[S], key string, h uint64, now, n int64, commit bool) algo.Result {
	a, i := g.locate(sh, key, h)
	if i < 0 {
		ns, r := g.f(algo.State{}, now, g.p, n)
		if commit && r.Allowed && n > 0 && !g.gone.Load() {
			g.insert(sh, key, h, ns, now)
		}
		return r
	}
	e := P(&a.slots[i])
	for k, f := range sh.frozen {
		if f.i == i { // held by this batch
			ns, r := g.f(f.s, now, g.p, n)
			if commit {
				e.put(ns)
				sh.frozen = append(sh.frozen[:k], sh.frozen[k+1:]...)
			}
			return r
		}
	}
	if !commit {
		old, _ := e.seize(frozen)
		sh.frozen = append(sh.frozen, frozenSlot{i, old})
		_, r := g.f(old, now, g.p, n)
		return r
	}
	return e.apply(now, g.p, n, g.f) // lock-free deciders may still race on this slot
}

// update implements updater (reservations) with the shard lock held.
func (g *lockFree[S, P]) update(key string, h uint64, now int64, f func(algo.State, int64) (algo.State, bool)) {
	sh := g.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a, i := g.locate(sh, key, h)
	if i < 0 {
		if next, write := f(algo.State{}, now); write && !g.gone.Load() {
			g.insert(sh, key, h, next, now)
		}
		return
	}
	P(&a.slots[i]).change(now, f)
}

// insert adds a key known to be absent, with the lock held: it drops expired state first,
// rebuilds the array when tombstones and growth call for it, and publishes the slot's meta
// last. Store.evictOver keeps the store under MaxKeys afterwards.
func (g *lockFree[S, P]) insert(sh *lshard[S], key string, h uint64, s algo.State, now int64) {
	full := func(a *larray[S]) bool { return a == nil || (a.used+1)*100 > len(a.slots)*g.maxLoad }
	a := sh.arr.Load()
	if full(a) && a != nil && g.st.sweepGap > 0 {
		g.st.sweepTime(now)
		g.sweepShard(sh, now, len(a.slots)) // may rebuild
		a = sh.arr.Load()
	}
	if full(a) {
		a = g.rebuild(sh)
	}
	e := &a.slots[a.free(h)]
	hdr(e).key.Store(unsafe.StringData(key))
	P(e).put(s)
	hdr(e).meta.Store(gmeta(key, h))
	a.used++
	a.live++
	g.st.keys.Add(1)
}

// rebuild copies the live slots into a fresh array sized for them (growing by a third when
// more than growLoad% would be live; shrinking when less than a fifth; otherwise only
// dropping tombstones), seizing each old slot as it goes so that lock-free deciders on the
// old array retry under the lock.
func (g *lockFree[S, P]) rebuild(sh *lshard[S]) *larray[S] {
	old := sh.arr.Load()
	live, size := 0, minCap
	if old != nil {
		live, size = old.live, len(old.slots)
		switch {
		case (live+1)*100 > size*g.growLoad:
			size = size + size/3 + 1
		case size > 64 && live*5 < size:
			size = live*5/3 + 1
		}
	}
	a := &larray[S]{slots: make([]S, max(size, minCap))}
	if old != nil {
		for k := range old.slots {
			e := &old.slots[k]
			if hdr(e).meta.Load() == 0 {
				continue
			}
			v, was := P(e).seize(tombstone)
			if was == tombstone {
				continue
			}
			ptr := hdr(e).key.Load()
			m := hdr(e).meta.Load()
			i := a.free(g.st.hash(unsafe.String(ptr, int(m>>32))))
			if was == frozen { // held by a batch in progress: it restores by index
				for f := range sh.frozen {
					if sh.frozen[f].i == k {
						sh.frozen[f].i = i
					}
				}
			}
			d := &a.slots[i]
			hdr(d).key.Store(ptr)
			P(d).put(v)
			hdr(d).meta.Store(m)
			a.used++
			a.live++
		}
	}
	sh.arr.Store(a)
	return a
}

// kill tombstones slot i if it is still live, with the lock held.
func (g *lockFree[S, P]) kill(a *larray[S], i int) {
	if _, was := P(&a.slots[i]).seize(tombstone); !isSentinel(was) {
		a.live--
		g.st.keys.Add(-1)
	}
}

// sample implements class.
func (g *lockFree[S, P]) sample(i int, best *victim, m int) int {
	sh := &g.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.arr.Load()
	if a == nil {
		return 0
	}
	c := len(a.slots)
	offered := 0
	for j, probed := sh.cursor%c, 0; offered < m && probed < c; probed++ {
		if e := &a.slots[j]; hdr(e).meta.Load() != 0 {
			if s, ok := P(e).peek(); ok {
				h := hdr(e)
				best.offer(unsafe.String(h.key.Load(), int(h.meta.Load()>>32)), algo.ExpiresAt(s, g.p))
				offered++
			}
		}
		if j++; j == c {
			j = 0
		}
	}
	return offered
}

func (g *lockFree[S, P]) reset(key string, h uint64) {
	sh := g.shard(h)
	sh.mu.Lock()
	if a, i := g.locate(sh, key, h); i >= 0 {
		g.kill(a, i)
	}
	sh.mu.Unlock()
}

// sweep visits about an eighth of every shard, one shard lock at a time.
func (g *lockFree[S, P]) sweep(now int64) int {
	live := 0
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		if a := sh.arr.Load(); a != nil {
			g.sweepShard(sh, now, max(64, len(a.slots)/8))
			live += sh.arr.Load().live // sweepShard may have rebuilt it
		}
		sh.mu.Unlock()
	}
	return live
}

// retire implements class. An empty class has no slot a lock-free decider could find, so
// holding the shard locks is enough.
func (g *lockFree[S, P]) retire(drop func()) bool {
	return underAll(len(g.shards), func(i int) *sync.Mutex { return &g.shards[i].mu }, func() bool {
		for i := range g.shards {
			if a := g.shards[i].arr.Load(); a != nil && a.live > 0 {
				return false
			}
		}
		g.gone.Store(true)
		drop()
		return true
	})
}

// sweepShard tombstones state that is equivalent to empty as of now in up to budget slots
// from the cursor, with the lock held, and rebuilds the array once tombstones outnumber
// live keys (or it has emptied out).
func (g *lockFree[S, P]) sweepShard(sh *lshard[S], now int64, budget int) {
	a := sh.arr.Load()
	c := len(a.slots)
	i := sh.cursor % c
	for ; budget > 0; budget-- {
		if e := &a.slots[i]; hdr(e).meta.Load() != 0 && P(e).retire(now, g.p) {
			a.live--
			g.st.keys.Add(-1)
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
