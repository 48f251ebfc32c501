// Package denycache answers, in-process, requests that the store has just denied and would
// deny again, so that a client hammering a key over its limit costs the store nothing: a
// decorator around a sluice.Limiter (typically the Redis store), in the manner of
// envoyproxy/ratelimit's local cache of over-limit keys.
//
//	lim := failover.New(denycache.New(redis)) // 8 MiB of denials, each answered for at most 1s
//	d, err := sluice.AllowN(ctx, lim, key, limit, 1)
//
// # Why a remembered denial is exact
//
// When the store denies n units of key under limit with RetryAfter r, the same request is
// denied at every moment before r has passed: under all six algorithms a key's allowance
// only grows with time, spending only lowers it, and r is the exact time at which it first
// suffices (internal/algo). Until then the Cache answers a request for the same key, Limit
// and cost n itself: not allowed, RetryAfter and ResetAfter those of the denial less the
// time since (rounded up to the µs), Remaining the store's figure at the denial, and Path
// sluice.PathCache. The time of a denial is taken before the store is called.
//
// Only what is certain is answered: a request of one limit with the cost of the
// remembered denial (another cost, a look, or several limits ask the inner limiter, and
// the denials in its answers are remembered); and only denials the store made
// (sluice.PathStore) with a positive RetryAfter, never a Concurrency limit's (a release
// frees a slot sooner).
//
// The Cache's answers report the store as not called (sluice.Report.StoreCalled), so a
// failover decorator above it judges the store by its own answers alone. Package stack
// puts it there, below failover.
//
// # Resets and staleness
//
// Reset, Settle and a reservation's Cancel through the Cache forget the key's denial, and
// a denial decided meanwhile is not remembered; so does an allowed request for the key. A
// reset the Cache does not see (another replica's, a key deleted in Redis) goes unnoticed
// until the denial expires: WithMaxAge (default 1s) bounds how long any denial is answered
// without asking the store. Spending elsewhere only lengthens the true wait. Each Limit has
// its own entries, so a changed limit asks the store.
//
// # Memory
//
// The Cache holds at most WithMaxBytes (default 8 MiB) of entries, counting each as its
// key's bytes plus EntryOverhead, in 64 shards of one mutex and map each. A full shard
// drops expired entries among a few it looks at, then arbitrary ones; a key too large for
// a shard's share is never remembered. There is no background goroutine and nothing to
// close. A request pays a hash of its key and a clock reading, and, while its shard holds a
// denial, one map lookup under the shard's mutex.
package denycache

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

const (
	// DefaultMaxBytes is the default of WithMaxBytes.
	DefaultMaxBytes = 8 << 20
	// DefaultMaxAge is the default of WithMaxAge.
	DefaultMaxAge = time.Second
	// EntryOverhead is what an entry is counted as beyond its key's bytes: its map slot
	// and the map's overhead per slot (BenchmarkEntryBytes).
	EntryOverhead = 160

	numShards = 64
	// probe is how many entries a full shard looks at for expired ones before it drops
	// arbitrary ones.
	probe = 16
)

// Cache is a sluice.Limiter that remembers the store's denials and answers repeats of them
// itself (see the package doc). It is safe for concurrent use. Create it with New.
type Cache struct {
	inner    sluice.Limiter
	maxAge   time.Duration
	maxBytes int64
	clock    func() time.Time // time.Now unless WithClock
	base     time.Time
	seed     maphash.Seed
	shards   [numShards]shard
}

type shard struct {
	mu    sync.Mutex
	gen   atomic.Uint64 // counts Resets: a denial decided while one ran is not remembered
	n     atomic.Int64  // len(m), read without the mutex
	bytes int64
	m     map[slot]entry
	_     [64 - 8 - 8 - 8 - 8 - 8]byte
}

type slot struct {
	key   string
	limit sluice.Limit
}

// entry is one remembered denial of n units, made at (clock time) at; it answers until
// until = at + min(retryAfter, MaxAge).
type entry struct {
	n                      int64
	at, until              time.Duration
	remaining              int64
	resetAfter, retryAfter time.Duration
}

// Option configures a Cache.
type Option func(*Cache)

// WithMaxBytes bounds the memory the entries take, counting each as len(key) +
// EntryOverhead (default DefaultMaxBytes). A non-positive n keeps the default.
func WithMaxBytes(n int64) Option {
	return func(c *Cache) {
		if n > 0 {
			c.maxBytes = n
		}
	}
}

// WithMaxAge bounds how long a denial is answered without asking the store (default
// DefaultMaxAge): the longest a reset the Cache does not see goes unnoticed. A
// non-positive d keeps the default.
func WithMaxAge(d time.Duration) Option {
	return func(c *Cache) {
		if d > 0 {
			c.maxAge = d
		}
	}
}

// WithClock makes the Cache measure time with clock instead of the monotonic clock: for
// tests and simulations whose store reads the same clock.
func WithClock(clock func() time.Time) Option {
	return func(c *Cache) {
		if clock != nil { // nil: the monotonic clock, as by default
			c.clock = clock
		}
	}
}

// New returns a Cache in front of inner.
func New(inner sluice.Limiter, opts ...Option) *Cache {
	c := &Cache{inner: inner, maxAge: DefaultMaxAge, maxBytes: DefaultMaxBytes, clock: time.Now,
		seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(c)
	}
	c.base = c.clock()
	for i := range c.shards {
		c.shards[i].m = make(map[slot]entry)
	}
	return c
}

// Len returns the number of denials held, expired ones not yet dropped included.
func (c *Cache) Len() int {
	var n int64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return int(n)
}

func (c *Cache) now() time.Duration { return c.clock().Sub(c.base) }

func (c *Cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%numShards]
}

// Decide implements sluice.Limiter: a request of one limit that repeats a remembered
// denial is answered from it; anything else is decided by the inner limiter, and the
// denials in its answer are remembered.
func (c *Cache) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	now, held := c.now(), true
	type asked struct {
		sh  *shard
		gen uint64 // the shard's Reset count before the store was asked
	}
	var buf [8]asked
	as := buf[:0]
	for _, r := range reqs {
		sh := c.shard(r.Key)
		as = append(as, asked{sh, sh.gen.Load()})
	}
	if len(reqs) == 1 && len(ds) > 0 && reqs[0].N > 0 {
		r, sh := &reqs[0], as[0].sh
		held = false
		if sh.n.Load() > 0 { // bad input matches no denial: the inner limiter rejects it
			var d sluice.Decision
			var ok bool
			if d, ok, held = c.lookup(sh, r.Key, r.Limit, r.N, now); ok {
				ds[0] = d
				return sluice.Report{}, nil
			}
		}
	}
	rep, err := c.inner.Decide(ctx, reqs, ds)
	if err == nil {
		for i := range reqs {
			if r := &reqs[i]; r.N > 0 {
				c.learn(as[i].sh, as[i].gen, now, r, &ds[i], held)
			}
		}
	}
	return rep, err
}

// AllowN is Decide of one request.
func (c *Cache) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	return sluice.AllowN(ctx, c, key, limit, n)
}

// Reserve implements sluice.Limiter by asking the inner limiter: a reservation only
// lengthens the wait of a remembered denial. Its Cancel forgets the denial, as Reset does.
func (c *Cache) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	res, err := c.inner.Reserve(ctx, key, limit, n)
	if err != nil || !res.OK {
		return res, err
	}
	return store.WithCancel(res, func(ctx context.Context) (ok bool, err error) {
		c.forgetAround(key, limit, func() { ok, err = res.Cancel(ctx) })
		return ok, err
	}), nil
}

// lookup answers a request for n units at now from a live denial of n units. held
// reports whether the key held a live denial of another cost.
func (c *Cache) lookup(sh *shard, key string, limit sluice.Limit, n int64, now time.Duration) (d sluice.Decision, ok, held bool) {
	k := slot{key, limit}
	sh.mu.Lock()
	e, ok := sh.m[k]
	if ok && (now >= e.until || now < e.at) { // expired, or a WithClock clock went back
		sh.remove(k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || e.n != n {
		return sluice.Decision{}, false, ok
	}
	since := now - e.at
	return sluice.Decision{
		Limit:      limit,
		Remaining:  e.remaining,
		ResetAfter: ceilMicros(max(e.resetAfter-since, 0)),
		RetryAfter: ceilMicros(e.retryAfter - since),
		Path:       sluice.PathCache,
	}, true, false
}

// ceilMicros rounds d up to a whole microsecond, the stores' resolution.
func ceilMicros(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// learn updates r's entry with the inner limiter's decision d on r, which it was asked at
// start while the shard's Reset count was gen. held says whether the key may hold a
// denial (false when the lookup just found none).
func (c *Cache) learn(sh *shard, gen uint64, start time.Duration, r *sluice.Request, d *sluice.Decision, held bool) {
	if d.Path != sluice.PathStore || r.Limit.Algorithm == sluice.Concurrency {
		return // a Concurrency denial's RetryAfter is an upper bound: a release frees a slot sooner
	}
	key := r.Key
	k := slot{key, r.Limit}
	if d.Allowed { // the units spent make a remembered denial's wait too short
		if !held {
			return
		}
		sh.mu.Lock()
		sh.remove(k)
		sh.mu.Unlock()
		return
	}
	if d.RetryAfter <= 0 {
		return
	}
	size := int64(len(key)) + EntryOverhead
	budget := c.maxBytes / numShards
	if size > budget {
		return
	}
	e := entry{
		n: r.N, at: start, until: start + min(d.RetryAfter, c.maxAge),
		remaining: d.Remaining, resetAfter: d.ResetAfter, retryAfter: d.RetryAfter,
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen.Load() != gen {
		return // a Reset ran while the store decided: the denial may predate it
	}
	sh.remove(k) // the denial replaces any earlier one
	if sh.bytes+size > budget {
		sh.makeRoom(size, budget, start)
	}
	sh.m[k] = e
	sh.bytes += size
	sh.n.Add(1)
}

// remove deletes k's entry, if there is one. The shard's mutex is held.
func (sh *shard) remove(k slot) {
	if _, ok := sh.m[k]; !ok {
		return
	}
	delete(sh.m, k)
	sh.bytes -= int64(len(k.key)) + EntryOverhead
	sh.n.Add(-1)
}

// makeRoom drops entries until need more bytes fit in budget: the expired ones among the
// first few it looks at, then arbitrary ones. The shard's mutex is held.
func (sh *shard) makeRoom(need, budget int64, now time.Duration) {
	looked := 0
	for k, e := range sh.m {
		if sh.bytes+need <= budget || looked == probe {
			break
		}
		looked++
		if now >= e.until || now < e.at {
			sh.remove(k)
		}
	}
	for k := range sh.m {
		if sh.bytes+need <= budget {
			return
		}
		sh.remove(k)
	}
}

// Reset implements sluice.Limiter: it forgets key's denial under limit and resets the
// inner limiter.
func (c *Cache) Reset(ctx context.Context, key string, limit sluice.Limit) (err error) {
	c.forgetAround(key, limit, func() { err = c.inner.Reset(ctx, key, limit) })
	return err
}

// Release implements sluice.Limiter: the inner limiter releases the lease. Concurrency
// denials are never remembered, so there is nothing to forget.
func (c *Cache) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	return c.inner.Release(ctx, key, limit, lease)
}

// Settle implements sluice.Limiter: the inner limiter settles, and the key's denial under
// the limit is forgotten, since a refund may have given units back.
func (c *Cache) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID,
	cost int64) (d sluice.Decision, err error) {
	c.forgetAround(key, limit, func() { d, err = c.inner.Settle(ctx, key, limit, reservation, cost) })
	return d, err
}

// forgetAround forgets key's denial under limit before and after f, which gives units back
// or resets: a denial decided while f was under way may predate it.
func (c *Cache) forgetAround(key string, limit sluice.Limit, f func()) {
	sh, k := c.shard(key), slot{key, limit}
	sh.forget(k)
	f()
	sh.forget(k)
}

// forget removes k's entry and counts a Reset.
func (sh *shard) forget(k slot) {
	sh.mu.Lock()
	sh.gen.Add(1)
	sh.remove(k)
	sh.mu.Unlock()
}
