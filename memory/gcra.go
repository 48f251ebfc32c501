package memory

import (
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// gslot is the slot of a bucket limit's key (algo.GCRA) when Rate divides Period (S = 1):
// its one word, the TAT, is the control word (lockfree.go), updated by compare-and-swap
// without a lock. Arrays are rebuilt above 70% full and grow above 68% live.
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

// retire is retireTAT: algo.ExpiresAt of the bucket machine's one-word state is that word
// (TestGCRAExpiresAtItsTAT).
func (e *gslot) retire(now int64, _ algo.Params) bool { return e.retireTAT(now) }

func (e *gslot) apply(now int64, p algo.Params, n int64, f algoFunc) algo.Result {
	for {
		old := e.ctl.Load()
		ns, r := f(algo.State{A: old & valMask}, now, p, n)
		if ns.A == old&valMask || e.ctl.CompareAndSwap(old, old&genMask|ns.A) {
			return r
		}
	}
}

type gcraClass struct {
	lockFree[gslot, *gslot]
}

func newGCRAClass(st *Store, p algo.Params, id int, gone *atomic.Bool) *gcraClass {
	g := new(gcraClass)
	g.init(st, p, id, gone, algo.GCRA, 70, 68)
	g.tat = true
	return g
}

// decide takes no lock for an existing key whose slot is live. An absent key that the
// decision admits is probed without the lock and inserted under it (missed); everything
// else is decided under the shard lock.
func (g *gcraClass) decide(key string, h uint64, now, n int64) algo.Result {
	sh := g.shard(h)
	seen := sh.seq.Load()
	a := sh.arr.Load()
	if a == nil {
		return g.decideUnder(sh, key, h, now, n)
	}
	p := gprobe(a, key, h, now, g.replacer())
	if p.hit {
		if r, ok := g.fast(&a.slots[p.i].ctl, p.m, now, n); ok {
			return r
		}
		return g.decideUnder(sh, key, h, now, n)
	}
	return g.missed(sh, seen, a, &p, key, h, now, n)
}

// missed decides key, which probe p of array a missed after the shard's seq read seen:
// an admission inserts under the lock, into the slot p chose (place) or as insert does,
// only if seq still reads seen (lockfree.go); anything else takes the lock's answer.
func (g *gcraClass) missed(sh *lshard[gslot], seen uint64, a *larray[gslot], p *probe, key string, h uint64, now, n int64) algo.Result {
	ns, r := algo.GCRAFresh(now, &g.p, n) // the class decides algo.GCRA with S = 1
	if n == 0 || !r.Allowed {
		return g.decideUnder(sh, key, h, now, n)
	}
	sh.mu.Lock()
	switch {
	case sh.seq.Load() != seen || sh.arr.Load() != a || g.gone.Load():
		r = g.decideIn(sh, key, h, now, n, true)
	case !g.place(sh, a, p, key, h, ns.A):
		g.insert(sh, key, h, ns, now) // still absent: seq is unchanged
	}
	sh.mu.Unlock()
	return r
}

// probe is what a lock-free lookup found: the key's slot (hit, with the meta word it
// matched), or the slot an insert may take (i, -1 if none) and the control word there.
type probe struct {
	i   int
	m   uint64
	hit bool
	ctl int64
}

// replacer returns the store whose sweep time bounds the emptied states an insert may
// replace in place (gprobe), or nil if it does not sweep: then none is replaced.
func (g *gcraClass) replacer() *Store {
	if g.st.sweepGap <= 0 {
		return nil
	}
	return g.st
}

// gprobe looks key up in a without the lock, as larray.find does, and on a miss chooses
// a slot for it: the first of its probe run, below maxGen, that is a tombstone or holds a
// state emptied by st.sweepAt(now) (none if st is nil), else the unused slot that ends
// the run (ctl 0).
func gprobe(a *larray[gslot], key string, h uint64, now int64, st *Store) probe {
	c := len(a.slots)
	want := gmeta(key, h)
	p := probe{i: -1}
	for i := lhome(want, c); ; {
		e := &a.slots[i].lhdr
		m := e.meta.Load()
		if m&keyMask == 0 {
			if p.i < 0 {
				p.i, p.ctl = i, 0
			}
			return p
		}
		v := e.ctl.Load()
		if m&keyMask == want && v != tombstone && e.holds(m, key) {
			return probe{i: i, m: m, hit: true}
		}
		if p.i < 0 && m>>genShift < maxGen && (v == tombstone ||
			!isSentinel(v) && v&valMask <= now && st != nil && v&valMask <= st.sweepAt(now)) {
			p.i, p.ctl = i, v
		}
		if i++; i == c {
			i = 0
		}
	}
}

// place inserts key, absent from a as probe p found it, with TAT tat, with the lock held
// and the shard unchanged since p began: it gives the key slot p.i, replacing the emptied
// state p read there, if any. It reports false, having changed nothing, when an unused
// slot would take the array over its load or that state was decided since.
func (g *gcraClass) place(sh *lshard[gslot], a *larray[gslot], p *probe, key string, h uint64, tat int64) bool {
	if p.i < 0 {
		return false
	}
	e := &a.slots[p.i].lhdr
	m := gmeta(key, h)
	switch {
	case e.meta.Load()&keyMask == 0: // unused
		if int(sh.used+1)*100 > len(a.slots)*g.maxLoad {
			return false
		}
		sh.used++
		g.st.count(&sh.n, 1)
	case p.ctl == tombstone:
		g.st.count(&sh.n, 1)
	default: // an emptied state, replaced: the count stays
		// One swap ends the old key's generation; the key and meta follow (lockfree.go).
		next := (e.meta.Load()>>genShift+1)<<genShift | m&keyMask
		if !e.ctl.CompareAndSwap(p.ctl, int64(next)&genMask|tat) {
			return false
		}
		e.setKey(unsafe.StringData(key), next)
		sh.changed()
		return true
	}
	gassign(e, unsafe.StringData(key), m, tat)
	sh.changed()
	return true
}

// gassign is larray.assign for a gslot, with the lock held: the next generation, the key,
// meta, and the control word (TAT tat) last, with no call through assign's put.
func gassign(e *lhdr, ptr *byte, m uint64, tat int64) {
	next := (e.meta.Load()>>genShift+1)<<genShift | m&keyMask
	e.setKey(ptr, next)
	e.ctl.Store(int64(next)&genMask | tat)
}

// fast decides on control word e of a slot that find matched with meta m, without the
// lock. It reports false, having written nothing, if the word is a sentinel or of another
// generation.
func (g *gcraClass) fast(e *atomic.Int64, m uint64, now, n int64) (algo.Result, bool) {
	for {
		old := e.Load()
		if isSentinel(old) || !sameGen(old, m) {
			return algo.Result{}, false
		}
		tat := old & valMask
		if n > 0 { // only the admission between the load and the swap; the results after
			if next, ok := algo.GCRAStep(tat, now, &g.p, n); ok {
				if e.CompareAndSwap(old, old&genMask|next) {
					return algo.GCRAAllowed(next, now, &g.p), true
				}
				continue
			}
		}
		_, r := algo.GCRA(algo.State{A: tat}, now, g.p, n) // a look or a denial writes nothing
		return r, true
	}
}
