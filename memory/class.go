package memory

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/table"
	"github.com/sluicehq/sluice/store"
)

// class holds every key's state under one Limit.
type class interface {
	id() int
	maxCost() int64
	shardIndex(h uint64) int
	lock(h uint64)
	unlock(h uint64)
	// decide decides and commits, under the shard lock or (lockfree.go) without it.
	decide(key string, h uint64, now, n int64) algo.Result
	// decideLocked decides with the shard lock held; it spends only if commit.
	decideLocked(key string, h uint64, now, n int64, commit bool) algo.Result
	reset(key string, h uint64) bool // reports whether the key had state
	// len is the number of states held, read under each shard's lock in turn.
	len() int64
	// sweep deletes expired state from a slice of every shard and returns how many
	// states the class holds.
	sweep(now int64) int
	// sample offers up to m of shard i's entries, from its sweep cursor on, to best.
	sample(i int, best *victim, m int) int
	// retire takes every shard lock in index order and, if the class holds no state, sets
	// its gone flag and calls drop before releasing them. A retired class stores nothing
	// more: its callers, seeing the flag, decide again on the Limit's new class.
	retire(drop func()) bool
}

// shard is a lock and a table, padded so that neighbouring shards' locks do not share a
// cache line.
type shard[S any] struct {
	mu     sync.Mutex
	t      table.Table[S]
	cursor int
	n      int64 // states held, under mu, on the lock's line (Store.count)
	_      [64 - 8 - 32 - 8 - 8]byte
}

// ops adapts one algorithm's state type S to the tables.
type ops[S any] struct {
	// decide runs the algorithm on *s, updating it only when commit is set and the cost
	// was allowed and non-zero.
	decide func(s *S, now int64, p algo.Params, n int64, commit bool) algo.Result
	// expires is when *s becomes equivalent to a fresh key (algo.ExpiresAt).
	expires func(s *S, p algo.Params) int64
}

// classHead begins both class types (gen, lockFree).
type classHead struct {
	st  *Store
	cid int
	p   algo.Params
}

func (c *classHead) id() int             { return c.cid }
func (c *classHead) params() algo.Params { return c.p }
func (c *classHead) maxCost() int64      { return c.p.MaxCost() }

// shardOf is a class's shard type: a lock, and the states held, read under it.
type shardOf[T any] interface {
	*T
	mutex() *sync.Mutex
	held() int64
}

func (sh *shard[S]) mutex() *sync.Mutex  { return &sh.mu }
func (sh *shard[S]) held() int64         { return sh.n }
func (sh *lshard[S]) mutex() *sync.Mutex { return &sh.mu }
func (sh *lshard[S]) held() int64        { return sh.n }

// heldIn implements class.len over shards.
func heldIn[T any, P shardOf[T]](shards []T) int64 {
	return int64(sweepIn(shards, func(P) {}))
}

// sweepIn implements class.sweep over shards: f sweeps a slice of one, with its lock held.
func sweepIn[T any, P shardOf[T]](shards []T, f func(P)) int {
	live := int64(0)
	for i := range shards {
		sh := P(&shards[i])
		sh.mutex().Lock()
		f(sh)
		live += sh.held()
		sh.mutex().Unlock()
	}
	return int(live)
}

// retireIn implements class.retire over shards, whose gone flag is gone.
func retireIn[T any, P shardOf[T]](shards []T, gone *atomic.Bool, drop func()) bool {
	for i := range shards {
		P(&shards[i]).mutex().Lock()
	}
	defer func() {
		for i := range shards {
			P(&shards[i]).mutex().Unlock()
		}
	}()
	for i := range shards {
		if P(&shards[i]).held() > 0 {
			return false
		}
	}
	gone.Store(true)
	drop()
	return true
}

type gen[S any] struct {
	classHead
	mask   uint64
	shards []shard[S]
	ops    ops[S]
	gone   *atomic.Bool // retired: see class.retire
}

// newClass makes the class for l; gone is its retired flag, which the caller reads.
func newClass(st *Store, l sluice.Limit, id int, gone *atomic.Bool) class {
	p := algo.ParamsOf(l)
	if p.Calendar {
		return newCalendarClass(st, l.Calendar, p, id, gone)
	}
	switch l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket: // one machine, algo.GCRA
		if p.S > 1 {
			// S > 1: the TAT has a fractional part (algo.Params), two words.
			return newPairClass(st, p, id, gone, algo.GCRA)
		}
		return newGCRAClass(st, p, id, gone)
	case sluice.SlidingWindow:
		return windowClass{newGen(st, p, id, gone, stateOps(algo.SlidingWindow))}
	case sluice.SlidingLog:
		return newGen(st, p, id, gone, ops[*algo.Log]{
			decide: func(s **algo.Log, now int64, p algo.Params, n int64, commit bool) algo.Result {
				return lazy(s, func(l *algo.Log) algo.Result { return algo.SlidingLog(l, now, p, n, commit) })
			},
			expires: func(s **algo.Log, p algo.Params) int64 {
				if l := *s; l != nil && l.Len() > 0 {
					l.Shrink()
					return l.Newest() + p.Period
				}
				return 0
			},
		})
	case sluice.Concurrency:
		return leaseClass{newGen(st, p, id, gone, ops[*algo.Leases]{
			decide: func(s **algo.Leases, now int64, p algo.Params, n int64, commit bool) algo.Result {
				var id uint64
				if commit && n > 0 {
					id = newLeaseID()
				}
				return takeLease(s, now, p, n, id, commit)
			},
			expires: func(s **algo.Leases, p algo.Params) int64 {
				if l := *s; l != nil {
					return l.ExpiresAt()
				}
				return 0
			},
		})}
	default:
		return newPairClass(st, p, id, gone, algo.FixedWindow)
	}
}

// newCalendarClass decides a calendar limit with algo.CalendarWindow, on bounds cached
// while the decision's instant stays in their middle period.
func newCalendarClass(st *Store, c sluice.Calendar, p algo.Params, id int, gone *atomic.Bool) class {
	var cache atomic.Pointer[algo.Bounds]
	bounds := func(now int64) algo.Bounds {
		if b := cache.Load(); b != nil && b[1] <= now && now < b[2] {
			return *b
		}
		b := algo.BoundsAt(c, now)
		cache.Store(&b)
		return b
	}
	decide := func(s algo.State, now int64, p algo.Params, n int64) (algo.State, algo.Result) {
		return algo.CalendarWindow(s, now, p, bounds(now), n)
	}
	return calendarClass{newGen(st, p, id, gone, stateOps(decide)), bounds}
}

// stateOps is the ops of an algorithm f whose state is one algo.State.
func stateOps(f algoFunc) ops[algo.State] {
	return ops[algo.State]{
		decide: func(s *algo.State, now int64, p algo.Params, n int64, commit bool) algo.Result {
			ns, r := f(*s, now, p, n)
			if commit {
				*s = ns
			}
			return r
		},
		expires: func(s *algo.State, p algo.Params) int64 { return algo.ExpiresAt(*s, p) },
	}
}

// lazy runs f on *s, or on a new T stored in *s only if f leaves it non-empty.
func lazy[T any, P interface {
	*T
	Len() int
}](s *P, f func(P) algo.Result) algo.Result {
	if *s != nil {
		return f(*s)
	}
	l := P(new(T))
	r := f(l)
	if l.Len() > 0 {
		*s = l
	}
	return r
}

// outcomer is a class whose decisions carry more than algo.Result: a Concurrency limit's
// lease, a calendar limit's period. The store decides through it when a class has it.
type outcomer interface {
	// outcome is decide, or with locked decideLocked (the shard lock held).
	outcome(key string, h uint64, now, n int64, commit, locked bool) algo.Outcome
}

// calendarClass is a calendar limit's class: gen with the period bounds it decides in.
type calendarClass struct {
	*gen[algo.State]
	bounds func(now int64) algo.Bounds
}

// outcome implements outcomer.
func (c calendarClass) outcome(key string, h uint64, now, n int64, commit, locked bool) algo.Outcome {
	var r algo.Result
	if locked {
		r = c.decideLocked(key, h, now, n, commit)
	} else {
		r = c.decide(key, h, now, n)
	}
	return algo.Outcome{Result: r, Window: c.bounds(now).Window(now)}
}

// leaseClass is a Concurrency limit's class; outcome reports the lease a decision takes.
type leaseClass struct{ *gen[*algo.Leases] }

// outcome implements outcomer.
func (c leaseClass) outcome(key string, h uint64, now, n int64, commit, locked bool) algo.Outcome {
	var id uint64
	if commit && n > 0 {
		id = newLeaseID()
	}
	take := func(s **algo.Leases, now int64, p algo.Params, n int64, commit bool) algo.Result {
		return takeLease(s, now, p, n, id, commit)
	}
	sh := &c.shards[c.shardIndex(h)]
	if !locked {
		sh.mu.Lock()
		defer sh.mu.Unlock()
	}
	r := c.decideWith(sh, key, h, now, n, commit, take)
	if !r.Allowed || !commit || n == 0 {
		id = 0
	}
	return algo.Outcome{Result: r, Lease: id}
}

// takeLease decides a Concurrency request on the key's lease set, taking lease id if it
// admits cost 1 with commit set; the set is made on the first lease.
func takeLease(s **algo.Leases, now int64, p algo.Params, n int64, id uint64, commit bool) algo.Result {
	return lazy(s, func(l *algo.Leases) algo.Result { return algo.Concurrency(l, now, p, n, id, commit) })
}

func newGen[S any](st *Store, p algo.Params, id int, gone *atomic.Bool, o ops[S]) *gen[S] {
	return &gen[S]{classHead: classHead{st, id, p}, mask: uint64(st.shards - 1),
		shards: make([]shard[S], st.shards), ops: o, gone: gone}
}

// The high half of the hash picks the shard; the low half, the slot.
func (g *gen[S]) shardIndex(h uint64) int { return int((h >> 32) & g.mask) }
func (g *gen[S]) lock(h uint64)           { g.shards[g.shardIndex(h)].mu.Lock() }
func (g *gen[S]) unlock(h uint64)         { g.shards[g.shardIndex(h)].mu.Unlock() }

func (g *gen[S]) decide(key string, h uint64, now, n int64) algo.Result {
	sh := &g.shards[g.shardIndex(h)]
	sh.mu.Lock()
	r := g.decideWith(sh, key, h, now, n, true, g.ops.decide)
	sh.mu.Unlock()
	return r
}

func (g *gen[S]) decideLocked(key string, h uint64, now, n int64, commit bool) algo.Result {
	return g.decideWith(&g.shards[g.shardIndex(h)], key, h, now, n, commit, g.ops.decide)
}

// decideWith decides with f, the class's ops.decide or a variant of it, with the lock held.
func (g *gen[S]) decideWith(sh *shard[S], key string, h uint64, now, n int64, commit bool,
	f func(s *S, now int64, p algo.Params, n int64, commit bool) algo.Result) algo.Result {
	if i := sh.t.Find(key, h); i >= 0 {
		return f(&sh.t.At(i).V, now, g.p, n, commit)
	}
	var s S
	r := f(&s, now, g.p, n, commit)
	if commit && r.Allowed && n > 0 && !g.gone.Load() {
		g.add(sh, key, h, s, now)
	}
	return r
}

// add inserts a new key, dropping expired state first rather than growing the table.
func (g *gen[S]) add(sh *shard[S], key string, h uint64, s S, now int64) {
	t := &sh.t
	if t.Full() && g.st.sweepGap > 0 {
		g.st.sweepTime(now)
		g.sweepShard(sh, now, t.Cap())
	}
	t.Insert(key, h, s)
	g.st.count(&sh.n, 1)
}

func (g *gen[S]) len() int64              { return heldIn(g.shards) }
func (g *gen[S]) retire(drop func()) bool { return retireIn(g.shards, g.gone, drop) }

// sweep visits about an eighth of every shard, one shard lock at a time.
func (g *gen[S]) sweep(now int64) int {
	return sweepIn(g.shards, func(sh *shard[S]) { g.sweepShard(sh, now, max(64, sh.t.Cap()/8)) })
}

// sample implements class.
func (g *gen[S]) sample(i int, best *victim, m int) int {
	sh := &g.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := &sh.t
	c := t.Cap()
	offered := 0
	for j, probed := sh.cursor%max(c, 1), 0; offered < m && probed < c; probed++ {
		if e := t.At(j); e.Used() {
			best.offer(e.Key(), g.ops.expires(&e.V, g.p))
			offered++
		}
		if j++; j == c {
			j = 0
		}
	}
	return offered
}

func (g *gen[S]) reset(key string, h uint64) bool {
	sh := &g.shards[g.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.t.Find(key, h); i >= 0 {
		sh.t.Delete(i)
		g.st.count(&sh.n, -1)
		return true
	}
	return false
}

// sweepShard deletes the state equivalent to empty in up to budget slots from the shard's
// cursor, then shrinks a table that has emptied out.
func (g *gen[S]) sweepShard(sh *shard[S], now int64, budget int) {
	t := &sh.t
	c := t.Cap()
	if t.Len() == 0 || c == 0 {
		return
	}
	i := sh.cursor % c
	for ; budget > 0; budget-- {
		e := t.At(i)
		if e.Used() && g.ops.expires(&e.V, g.p) <= now {
			t.Delete(i) // a later entry may have moved into i: look again
			g.st.count(&sh.n, -1)
			continue
		}
		if i++; i == c {
			i = 0
		}
	}
	sh.cursor = i
	t.Shrink()
}

// newLeaseID is a random lease id in [1, store.MaxLeaseID].
func newLeaseID() uint64 { return rand.Uint64N(store.MaxLeaseID) + 1 }

// release gives back lease id of key, if the class holds Concurrency state (else false).
func release(c class, key string, h uint64, now int64, id uint64) bool {
	lc, ok := c.(leaseClass)
	if !ok {
		return false
	}
	g := lc.gen
	sh := &g.shards[g.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.t.Find(key, h)
	if i < 0 || sh.t.At(i).V == nil {
		return false
	}
	return algo.Release(sh.t.At(i).V, now, id)
}

// windowClass is SlidingWindow's class: gen with the updater settlements use.
type windowClass struct{ *gen[algo.State] }

// update implements updater with the shard lock held.
func (w windowClass) update(key string, h uint64, now int64, f func(algo.State, int64) (algo.State, bool)) {
	sh := &w.shards[w.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w.decideWith(sh, key, h, now, 1, true, func(s *algo.State, now int64, _ algo.Params, _ int64, _ bool) algo.Result {
		next, write := f(*s, now)
		if write {
			*s = next
		}
		return algo.Result{Allowed: write} // a new key is added only if written
	})
}
