package memory

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/table"
)

// The lock-free classes (the bucket machine's one-word TAT in gcra.go, the two-word states
// in pair.go) decide an existing key without the shard lock: a decision finds the slot
// with atomic loads and updates the state inside it, so the only cache line it writes is
// the slot's own.
//
// Every slot begins with an lhdr: the key, its meta word, and a control word that holds
// the state's time-like word (GCRA's TAT, the two-word states' B) or a sentinel. The shard
// lock serialises everything that changes which key a slot holds (inserts, deletions,
// moves, rebuilds) and the multi-limit and reservation paths.
//
// Slots are reused within an array. Each use of a slot has a generation: one more than the
// slot's previous use, starting at 1 in a fresh array, never wrapping (a slot at maxGen
// stays a tombstone until the array is rebuilt). The meta and control words both carry it
// in their bits from genShift up. The rules that make the lock-free path safe:
//
//   - A slot gets a key (an insert, or a move), under the lock, only while it is unused or
//     tombstone: key, then meta with the next generation, then the control word, which
//     publishes the state (a replacement in place orders these otherwise; see below). So
//     within one array a slot and a generation name exactly one key, and a control word of
//     generation g exists only from g's publication to the tombstone that ends it.
//   - A decider reads meta, the key pointer and meta again (holds; setKey brackets every
//     change of the pointer to a key of another length with meta writes), compares the
//     key's bytes only if meta did not change, so it never reads past the end of another
//     key, then reads the control word, goes on only if its generation is meta's, and
//     writes only with a compare-and-swap (GCRA) or a claim (pair.go) expecting the word
//     it read. Its write succeeds only while generation g lives, and g's key is the one it
//     compared: it never touches another key's state (no ABA;
//     TestReusedSlotRefusesAStaleDecider).
//   - Deleting a key (sweep, Reset, eviction) is package table's backward shift, except
//     that a deleted or moved-from slot is a tombstone until the shift reaches it, since a
//     lock-free decider may hold its index and generation, and a tombstone makes its swap
//     fail. Later keys of the probe run that may sit at the hole ([table.Fills]) move back
//     (shift, or sweepAll for a whole shard; a move seizes the old slot and is a new use of
//     the new one), and the hole a run ends with becomes unused, keeping its generation. A
//     live key stays reachable from its home without crossing an unused slot. A lock-free
//     finder that misses a moving key retries under the lock.
//   - A rebuild seizes every old slot (control word = tombstone) as it copies it, so a
//     decider still on the old array fails and retries under the lock. An old array is
//     never written again.
//   - A multi-limit batch freezes the slots it reads (control word = frozen) until it
//     commits or gives up, so no lock-free decision slips in between its evaluation and
//     its commit. A moved or copied frozen slot carries its batch's record along.
//   - A decider that misses, or meets tombstone, frozen or another generation, falls back
//     to the locked path, which is authoritative, except an admission of a missing GCRA
//     key, below.
//   - Every section under the lock that gives, takes or moves a key, tombstones a state or
//     replaces the array ends by advancing the shard's seq (changed), after its last such
//     write and before it unlocks. seq only grows.
//
// An insert after a lock-free probe (gcraClass.missed) reads seq, then the array, probes
// without the lock and, finding no key, chooses a slot on the key's probe run; it then
// takes the lock and writes only if seq still reads what it read. A section whose bump
// that first read observed had finished its writes before the probe began (an atomic
// load that observes a store is synchronized after it); one that bumped later released
// the lock before the inserter took it, which then reads a larger seq. With seq
// unchanged, the only writes since the probe are deciders' swaps of live control words
// within their generation, which change no key, meta word or sentinel: the key is still
// absent, its probe run is the one read, and the chosen slot is still what the probe read
// (unused, within maxLoad; a tombstone; or a state that has emptied, replaced in place).
// A miss that would only look or deny writes nothing and takes the lock's answer.
//
// An emptied state is replaced in place only in a store that sweeps (gcraClass.replacer),
// only if it had emptied by sweepAt(now) (so Store.now never decides before the
// deletion's time), and the state count does not change. The slot stays keyed, so no
// probe run changes. One compare-and-swap takes the control word from the exact word the
// probe read to the new key's state under generation g+1; then the key; then meta (g+1).
// The swap fails if a decider has spent the old state or a batch froze it (the inserter
// then decides under the lock); once it succeeds no decider of the old key can write,
// since its swap expects generation g. A reader of meta g meets the old word (a decision
// on the old key, before its deletion) or a word of g+1, which sameGen refuses; a reader
// of meta g+1 reads the new key and the word of g+1, both stored before it.
//
// A state's word is a time in epoch microseconds or a count, in [0, 2^genShift) (Store.now
// keeps the clock at most maxMicros, and a state is at most store.MaxPeriod ahead of it),
// so it never reaches the generation's bits or looks like a sentinel.
const (
	tombstone = -1 << 63
	frozen    = tombstone + 1
	busy      = tombstone + 2 // a two-word slot held by a decider (pair.go)
)

// The generation's bits, in both the meta and the control word.
const (
	genShift  = 53
	maxGen    = 1<<(63-genShift) - 1
	genMask   = int64(maxGen) << genShift // of a control word
	valMask   = 1<<genShift - 1           // a control word's state
	keyMask   = 1<<genShift - 1           // a meta word's length and tag
	maxMicros = 1<<genShift - 1<<51       // the latest time the store decides at (early 2184)
)

// pack is the control word of state word v in a slot whose meta word is m: v with m's
// generation, or v itself if it is a sentinel.
func pack(m uint64, v int64) int64 {
	if isSentinel(v) {
		return v
	}
	return int64(m)&genMask | v
}

// sameGen reports whether control word c belongs to the use of the slot meta m names.
func sameGen(c int64, m uint64) bool { return (c^int64(m))&genMask == 0 }

// keyLen is the length of the key meta m names; 0 for a slot that holds none.
func keyLen(m uint64) int { return int(m&keyMask) >> 32 }

// rekeying is the length field of a meta word while its slot's key pointer changes:
// longer than any key, so that no probe matches it, and not zero, so it ends no run.
const rekeying = uint64(1<<(genShift-32)-1) << 32

// setKey gives the slot key ptr and then meta m, with the lock held. A keyed slot whose
// key changes length reads rekeying while the pointer changes, so that holds never pairs
// a meta word with a key of another length. A key of the same length needs no mark: a
// reader that pairs the old meta with the new pointer reads only the new key's bytes, then
// meets another generation's control word (TestSameLengthRekeyRefusesAStaleReader). An
// unused slot needs none: a reader ends its probe there and reads no pointer.
func (h *lhdr) setKey(ptr *byte, m uint64) {
	if old := h.meta.Load(); old&keyMask != 0 && keyLen(old) != keyLen(m) {
		h.meta.Store(old | rekeying)
	}
	h.key.Store(ptr)
	h.meta.Store(m)
}

// holds reports whether the slot, whose meta word a lock-free reader read as m (matching
// key's length and tag), holds key. It reads the pointer, then meta again: unchanged, the
// pointer is the one stored with m; changed, it reports false and reads no key bytes.
func (h *lhdr) holds(m uint64, key string) bool {
	p := h.key.Load()
	return h.meta.Load() == m && unsafe.String(p, len(key)) == key
}

// retireTAT tombstones the slot if its control word holds a TAT at or before now (when
// GCRA's state empties), reporting whether it did.
func (h *lhdr) retireTAT(now int64) bool {
	v := h.ctl.Load()
	return !isSentinel(v) && v&valMask <= now && h.ctl.CompareAndSwap(v, tombstone)
}

// isSentinel reports whether a control word holds a sentinel rather than state.
func isSentinel(v int64) bool { return v <= busy }

type lhdr struct {
	key  atomic.Pointer[byte]
	meta atomic.Uint64 // gen<<genShift | len(key)<<32 | tag; gen only for an unused slot
	ctl  atomic.Int64  // the state's time-like word, or a sentinel
}

// hdr is the header every slot type begins with (TestSlotsBeginWithHeader), reached by
// conversion so that lookups make no indirect calls.
func hdr[S any](e *S) *lhdr { return (*lhdr)(unsafe.Pointer(e)) }

func gmeta(key string, h uint64) uint64 { return uint64(len(key))<<32 | h>>32 }

// lhome is the slot a key prefers in an array of c slots: [table.Home] of its tag (the
// low 32 bits of its meta word), so that moving a key never reads its bytes.
func lhome(m uint64, c int) int { return table.Home(uint32(m), c) }

// minCap is the smallest array.
const minCap = 8

// cell is what the table needs of a slot type S beyond its header, each method called
// with the shard lock held.
type cell[S any] interface {
	*S
	// seize sets the control word to v (tombstone or frozen), waiting out a holder, and
	// returns the state it displaced and its control word (which may be a sentinel).
	seize(v int64) (s algo.State, was int64)
	// put stores s, the control word last, publishing and releasing the slot.
	put(s algo.State)
	// peek returns the state of a live slot, or false for a sentinel.
	peek() (algo.State, bool)
	// retire tombstones a live slot whose state is empty as of now, reporting whether it did.
	retire(now int64, p algo.Params) bool
	// apply runs f on a live slot's state and stores what it returns.
	apply(now int64, p algo.Params, n int64, f algoFunc) algo.Result
}

type algoFunc = func(algo.State, int64, algo.Params, int64) (algo.State, algo.Result)

// larray is one immutable-shape version of a shard's table; its counts live in the shard.
type larray[S any] struct {
	slots []S
}

type lshard[S any] struct {
	mu     sync.Mutex
	arr    atomic.Pointer[larray[S]]
	seq    atomic.Uint64 // changes whenever the lock's holder changes a slot's key (changed)
	frozen []frozenSlot  // slots a multi-limit batch holds, restored by unlock
	n      int64         // live slots of arr (states held), under mu (Store.count)
	cursor int32
	used   int32 // slots of arr with a key (live or tombstone), under mu; 64 bytes in all
}

// changed advances seq, with the lock held, after a section that changed a slot's key
// or replaced the array (lockfree.go's rules).
func (sh *lshard[S]) changed() { sh.seq.Store(sh.seq.Load() + 1) }

type frozenSlot struct {
	i int
	s algo.State
}

// refreeze moves a batch's record of frozen slot from to slot to: it restores by index.
func (sh *lshard[S]) refreeze(from, to int) {
	for f := range sh.frozen {
		if sh.frozen[f].i == from {
			sh.frozen[f].i = to
		}
	}
}

// lockFree is the shards of one class and every path that takes their locks. The hot,
// lock-free decide is the slot type's own (gcraClass.decide, pairClass.decide).
type lockFree[S any, P cell[S]] struct {
	classHead
	f      algoFunc
	mask   uint64
	shards []lshard[S]
	// maxLoad and growLoad, in hundredths: rebuild above maxLoad% used, growing when more
	// than growLoad% would be live.
	maxLoad, growLoad int
	gone              *atomic.Bool // retired: see class.retire
	// tat: a live control word's state is GCRA's TAT (gslot), which emptied tests in
	// line (retireTAT) and fresh decides in closed form.
	tat bool
}

func (g *lockFree[S, P]) init(st *Store, p algo.Params, id int, gone *atomic.Bool, f algoFunc, maxLoad, growLoad int) {
	*g = lockFree[S, P]{classHead: classHead{st, id, p}, f: f, mask: uint64(st.shards - 1),
		shards: make([]lshard[S], st.shards), maxLoad: maxLoad, growLoad: growLoad, gone: gone}
}

func (g *lockFree[S, P]) shardIndex(h uint64) int   { return int((h >> 32) & g.mask) }
func (g *lockFree[S, P]) shard(h uint64) *lshard[S] { return &g.shards[g.shardIndex(h)] }
func (g *lockFree[S, P]) lock(h uint64)             { g.shard(h).mu.Lock() }

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

// find returns the index of key's slot in a (live, frozen or held) and the meta word it
// matched, or -1. It needs no lock; without it, the caller checks the generation.
func (a *larray[S]) find(key string, h uint64) (int, uint64) {
	c := len(a.slots)
	if c == 0 {
		return -1, 0
	}
	want := gmeta(key, h)
	for i := lhome(want, c); ; {
		e := hdr(&a.slots[i])
		m := e.meta.Load()
		if m&keyMask == 0 {
			return -1, 0
		}
		if m&keyMask == want && e.ctl.Load() != tombstone && e.holds(m, key) {
			return i, m
		}
		if i++; i == c {
			i = 0
		}
	}
}

// place returns the slot an absent key whose meta is m goes to: the first reusable one
// (a tombstone or an unused slot whose generation is below maxGen) on its probe run. The
// array must have an unused slot.
func (a *larray[S]) place(m uint64) int {
	c := len(a.slots)
	for i := lhome(m, c); ; {
		e := hdr(&a.slots[i])
		m := e.meta.Load()
		if m&keyMask == 0 || (m>>genShift < maxGen && e.ctl.Load() == tombstone) {
			return i // an unused slot always has a generation to give
		}
		if i++; i == c {
			i = 0
		}
	}
}

// assign gives slot i to key with state s under the next generation, with the lock held,
// and reports whether the slot was unused.
func (a *larray[S]) assign(i int, ptr *byte, m uint64, s algo.State, put func(*S, algo.State)) bool {
	e := &a.slots[i]
	h := hdr(e)
	old := h.meta.Load()
	h.setKey(ptr, (old>>genShift+1)<<genShift|m&keyMask)
	put(e, s)
	return old&keyMask == 0
}

// shift closes the hole tombstone i leaves in its probe run, with the lock held, by
// [table.Table.Delete]'s backward shift (move), until an unused slot ends the run; the
// last hole becomes unused. A hole whose generation is exhausted stays a tombstone and
// ends the shift; such tombstones are stepped over.
func (g *lockFree[S, P]) shift(sh *lshard[S], a *larray[S], i int) {
	c := len(a.slots)
	for j := i; ; {
		hi := hdr(&a.slots[i])
		if hi.meta.Load()>>genShift >= maxGen {
			return
		}
		if j++; j == c {
			j = 0
		}
		e := &a.slots[j]
		he := hdr(e)
		m := he.meta.Load()
		if m&keyMask == 0 || j == i {
			hi.meta.Store(hi.meta.Load() &^ keyMask) // the key pointer stays: a finder may still read it
			sh.used--
			return
		}
		if he.ctl.Load() == tombstone {
			continue
		}
		if table.Fills(i, j, lhome(m, c)) {
			g.move(sh, a, j, i, m)
			i = j
		}
	}
}

// move moves the key of slot j, whose meta is m, to tombstone or unused slot i, with the
// lock held: it seizes j and gives i the key and state under a new generation.
func (g *lockFree[S, P]) move(sh *lshard[S], a *larray[S], j, i int, m uint64) {
	e := &a.slots[j]
	v, was := P(e).seize(tombstone)
	if was == frozen {
		sh.refreeze(j, i)
	}
	hi := hdr(&a.slots[i])
	hi.setKey(hdr(e).key.Load(), (hi.meta.Load()>>genShift+1)<<genShift|m&keyMask)
	P(&a.slots[i]).put(v)
}

// sweepAll deletes every state of the shard equivalent to empty as of now, with the lock
// held, closing the holes in the same walk: from an unused slot, run by run, it tombstones
// each emptied state, moves each live key back to the earliest hole it may fill (fill),
// and returns the holes left at a run's end to unused (endRun). A tombstone beyond the 32
// holes it tracks a run stays. It never shrinks the array.
func (g *lockFree[S, P]) sweepAll(sh *lshard[S], now int64) {
	a := sh.arr.Load()
	c := len(a.slots)
	gone := int64(0)
	p := 0
	for hdr(&a.slots[p]).meta.Load()&keyMask != 0 {
		if p++; p == c { // no unused slot (cannot happen below maxLoad): delete only
			for i := range a.slots {
				if hdr(&a.slots[i]).meta.Load()&keyMask != 0 && g.emptied(&a.slots[i], now) {
					gone++
				}
			}
			if gone > 0 {
				g.st.count(&sh.n, -gone)
				sh.changed()
			}
			return
		}
	}
	var r run
	for n, j := 0, p; n < c; n++ {
		if j++; j == c {
			j = 0
		}
		e := &a.slots[j]
		h := hdr(e)
		m := h.meta.Load()
		if m&keyMask == 0 {
			if r.n > 0 {
				endRun(sh, a, &r)
			}
			continue
		}
		retired := g.emptied(e, now)
		if retired {
			gone++
		}
		switch {
		case retired || h.ctl.Load() == tombstone:
			if m>>genShift < maxGen && r.n < len(r.holes) {
				r.holes[r.n] = j
				r.n++
			}
		case r.n > 0:
			g.fill(sh, a, &r, j, m)
		}
	}
	if gone > 0 {
		g.st.count(&sh.n, -gone)
	}
	if gone > 0 || r.changed {
		sh.changed()
	}
}

// run is sweepAll's record of the holes of the run it is walking.
type run struct {
	holes   [32]int
	n       int
	changed bool
}

// endRun returns the holes of the ended run r to unused, with the lock held.
func endRun[S any](sh *lshard[S], a *larray[S], r *run) {
	for _, x := range r.holes[:r.n] {
		hx := hdr(&a.slots[x])
		hx.meta.Store(hx.meta.Load() &^ keyMask) // the key pointer stays: a finder may still read it
		sh.used--
	}
	r.n = 0
	r.changed = true
}

// fill moves the live key of slot j, whose meta is m, back to the earliest hole of r it
// may fill ([table.Fills]), if any, with the lock held; j is then a hole.
func (g *lockFree[S, P]) fill(sh *lshard[S], a *larray[S], r *run, j int, m uint64) {
	k := lhome(m, len(a.slots))
	for q := 0; q < r.n; q++ {
		x := r.holes[q]
		if table.Fills(x, j, k) {
			g.move(sh, a, j, x, m)
			r.changed = true
			copy(r.holes[q:r.n], r.holes[q+1:r.n])
			r.n--
			if m>>genShift < maxGen {
				r.holes[r.n] = j
				r.n++
			}
			return
		}
	}
}

// emptied tombstones slot e if its state is equivalent to empty as of now, with the lock
// held, reporting whether it did.
func (g *lockFree[S, P]) emptied(e *S, now int64) bool {
	if g.tat {
		return hdr(e).retireTAT(now)
	}
	return P(e).retire(now, g.p)
}

func (g *lockFree[S, P]) locate(sh *lshard[S], key string, h uint64) (*larray[S], int) {
	a := sh.arr.Load()
	if a == nil {
		return nil, -1
	}
	i, _ := a.find(key, h)
	return a, i
}

// decideLocked decides with the shard lock held; it spends only if commit.
func (g *lockFree[S, P]) decideLocked(key string, h uint64, now, n int64, commit bool) algo.Result {
	return g.decideIn(g.shard(h), key, h, now, n, commit)
}

// decideUnder decides and commits under the shard lock.
func (g *lockFree[S, P]) decideUnder(sh *lshard[S], key string, h uint64, now, n int64) algo.Result {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return g.decideIn(sh, key, h, now, n, true)
}

// decideIn decides with the shard lock held. commit=false is a batch's evaluation: it
// freezes the slot until the batch commits or unlocks.
func (g *lockFree[S, P]) decideIn(sh *lshard[S], key string, h uint64, now, n int64, commit bool) algo.Result {
	a, i := g.locate(sh, key, h)
	if i < 0 {
		ns, r := g.fresh(now, n)
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

// fresh decides n at now on a key with no state: f on the zero State, in closed form for
// GCRA's (algo.GCRAFresh).
func (g *lockFree[S, P]) fresh(now, n int64) (algo.State, algo.Result) {
	if g.tat { // f is algo.GCRA, with S = 1 (newGCRAClass)
		return algo.GCRAFresh(now, &g.p, n)
	}
	return g.f(algo.State{}, now, g.p, n)
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
	P(&a.slots[i]).apply(now, g.p, 0, func(s algo.State, now int64, _ algo.Params, _ int64) (algo.State, algo.Result) {
		if next, write := f(s, now); write {
			return next, algo.Result{}
		}
		return s, algo.Result{}
	})
}

// insert adds a key known to be absent, with the lock held: it drops expired state first,
// rebuilds the array when it is still too full, and gives the key the first reusable slot
// of its probe run.
func (g *lockFree[S, P]) insert(sh *lshard[S], key string, h uint64, s algo.State, now int64) {
	full := func(a *larray[S]) bool { return a == nil || int(sh.used+1)*100 > len(a.slots)*g.maxLoad }
	a := sh.arr.Load()
	if full(a) && a != nil && g.st.sweepGap > 0 {
		g.sweepAll(sh, g.st.sweepAt(now))
		if a = sh.arr.Load(); !full(a) && int(sh.n)*100 > len(a.slots)*crowdedLoad {
			a = g.rebuild(sh, true) // sweeping freed too little room to be worth it again soon
		}
	}
	if full(a) {
		a = g.rebuild(sh, false)
	}
	m := gmeta(key, h)
	i := a.place(m)
	if g.tat { // a gslot: gassign, without assign's call through put
		e := hdr(&a.slots[i])
		if e.meta.Load()&keyMask == 0 {
			sh.used++
		}
		gassign(e, unsafe.StringData(key), m, s.A)
	} else if a.assign(i, unsafe.StringData(key), m, s, putS[S, P]) {
		sh.used++
	}
	g.st.count(&sh.n, 1)
	sh.changed()
}

// rebuild copies the live slots into a fresh array sized for them: 40% live when less
// than an eighth is live; else double when crowded (crowdedLoad), or a third larger when
// more than growLoad% would be live; else the same size, without exhausted tombstones. It
// seizes each old slot as it goes.
func (g *lockFree[S, P]) rebuild(sh *lshard[S], crowded bool) *larray[S] {
	old := sh.arr.Load()
	live, size := 0, minCap
	if old != nil {
		live, size = int(sh.n), len(old.slots)
		switch {
		case size > 64 && live*8 < size:
			size = live*5/2 + 1 // 40% live: room to refill before growing again
		case crowded:
			size *= 2
		case (live+1)*100 > size*g.growLoad:
			size = size + size/3 + 1
		}
	}
	a := &larray[S]{slots: make([]S, max(size, minCap))}
	used := 0
	if old != nil {
		for k := range old.slots {
			e := &old.slots[k]
			if hdr(e).meta.Load()&keyMask == 0 {
				continue
			}
			v, was := P(e).seize(tombstone)
			if was == tombstone {
				continue
			}
			ptr := hdr(e).key.Load()
			m := hdr(e).meta.Load()
			i := a.place(m)
			if was == frozen {
				sh.refreeze(k, i)
			}
			a.assign(i, ptr, m, v, putS[S, P])
			used++
		}
	}
	sh.used = int32(used)
	sh.arr.Store(a)
	sh.changed()
	return a
}

// crowdedLoad is the live share, in hundredths, above which an array that an insert has
// just swept is crowded: it doubles, so that inserts sweep seldom and runs stay short.
const crowdedLoad = 35

func putS[S any, P cell[S]](e *S, s algo.State) { P(e).put(s) }

// kill deletes slot i's state if it is still live, with the lock held.
func (g *lockFree[S, P]) kill(sh *lshard[S], a *larray[S], i int) {
	if _, was := P(&a.slots[i]).seize(tombstone); !isSentinel(was) {
		g.st.count(&sh.n, -1)
		g.shift(sh, a, i)
		sh.changed()
	}
}

func (g *lockFree[S, P]) len() int64 { return heldIn(g.shards) }

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
	for j, probed := int(sh.cursor)%c, 0; offered < m && probed < c; probed++ {
		if e := &a.slots[j]; hdr(e).meta.Load()&keyMask != 0 {
			if s, ok := P(e).peek(); ok {
				h := hdr(e)
				best.offer(unsafe.String(h.key.Load(), keyLen(h.meta.Load())), algo.ExpiresAt(s, g.p))
				offered++
			}
		}
		if j++; j == c {
			j = 0
		}
	}
	return offered
}

func (g *lockFree[S, P]) reset(key string, h uint64) bool {
	sh := g.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if a, i := g.locate(sh, key, h); i >= 0 {
		g.kill(sh, a, i)
		return true
	}
	return false
}

// sweep visits about an eighth of every shard, one shard lock at a time.
func (g *lockFree[S, P]) sweep(now int64) int {
	return sweepIn(g.shards, func(sh *lshard[S]) {
		if a := sh.arr.Load(); a != nil {
			g.sweepShard(sh, now, min(len(a.slots), max(64, len(a.slots)/8)))
		}
	})
}

// retire implements class. An empty class has no slot a lock-free decider could find.
func (g *lockFree[S, P]) retire(drop func()) bool { return retireIn(g.shards, g.gone, drop) }

// sweepShard deletes state equivalent to empty as of now in up to budget slots from the
// cursor, with the lock held, and rebuilds the array smaller once less than an eighth of
// it is live.
func (g *lockFree[S, P]) sweepShard(sh *lshard[S], now int64, budget int) {
	a := sh.arr.Load()
	c := len(a.slots)
	i := int(sh.cursor) % c
	for ; budget > 0; budget-- {
		if e := &a.slots[i]; hdr(e).meta.Load()&keyMask != 0 && P(e).retire(now, g.p) {
			g.st.count(&sh.n, -1)
			g.shift(sh, a, i) // a later key may have moved into i: look again
			continue
		}
		if i++; i == c {
			i = 0
		}
	}
	sh.cursor = int32(i)
	if c > 64 && int(sh.n)*8 < c {
		g.rebuild(sh, false)
	}
	sh.changed()
}
