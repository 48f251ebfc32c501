// Package memory is sluice's in-process store: a [sluice.Limiter] for every
// [sluice.Algorithm], running the state machines of internal/algo directly.
//
//	store := memory.New()
//	defer store.Close()
//	d, err := store.AllowN(ctx, "user:42", sluice.PerSecond(10), 1)
//
// # Layout
//
// State is kept per (key, Limit). Each distinct Limit gets its own set of shards (a
// "class"); each shard is a mutex and an open-addressing table whose slots hold the key
// (shared with the caller's string) beside the state inline. A decision on an existing key
// allocates nothing. The bucket limits (GCRA, TokenBucket and LeakyBucket, one machine:
// algo.GCRA) and FixedWindow decide an existing key without the shard lock, writing only
// its slot (lockfree.go): one word by compare-and-swap when Rate divides Period (gcra.go),
// else two words under a mark in the slot (pair.go). SlidingWindow and SlidingLog take the
// key's shard lock. SlidingLog keys hold one timestamp per unit admitted in the window;
// Concurrency keys one lease per request in flight. Records of costs to settle
// (sluice.Request.SettleTTL) are kept until their TTL passes.
//
// # Memory bound
//
// State that has become equivalent to empty is deleted, which changes no decision: by an
// incremental sweeper that visits a bounded slice of each shard every interval
// ([WithSweepInterval]), one shard lock at a time, and by an insert that finds its shard
// full. Tables shrink when they empty out; the lock-free ones reuse deleted keys' slots, so
// inserts of keys that come and go allocate nothing once the tables have their size. A
// class that holds no state and was not used since the sweeper's previous visit is
// retired, so Limits made on the fly cost nothing once idle; a decision that races the
// retirement is made again on the Limit's new class.
//
// With MaxKeys set, a decision that takes the store over the cap evicts before it returns:
// each eviction samples 8 entries from shards visited in turn across every Limit, and
// removes the one closest to empty (the earliest expiry). The cap holds whenever no
// decision is in flight; concurrent inserts can pass it by one key each until they return.
//
// # Clock
//
// By default the store reads a monotonic clock anchored at the wall time of New; WithClock
// substitutes a clock (tests, the simulator). internal/algo treats time that steps back
// conservatively.
package memory

import (
	"context"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// Store is the in-process limiter. The zero Store is not usable; call New.
type Store struct {
	clock    func() int64 // µs since the Unix epoch; read through now()
	shards   int
	maxKeys  int64
	sweepGap time.Duration

	seed    maphash.Seed // hash, where uintptr is narrower than 64 bits
	mseed   uintptr      // hash, where it is 64 bits wide
	classes atomic.Pointer[map[sluice.Limit]*classRef]
	list    atomic.Pointer[[]*classRef] // the classes in creation order, for sweeping and eviction
	evictAt atomic.Uint64               // eviction's cursor over list × shards
	last    atomic.Pointer[classRef]    // the most recently used class: skips the map lookup
	addMu   sync.Mutex
	nextID  int
	keys    atomic.Int64  // states held, kept only under MaxKeys (count)
	evicted atomic.Uint64 // states evicted over MaxKeys
	sweptAt atomic.Int64  // the latest time any sweep deleted state as of
	res     reservations
	closed  atomic.Bool
	stop    chan struct{}
	stopped chan struct{}
}

type classRef struct {
	limit sluice.Limit
	c     class
	more  outcomer    // c, when its decisions carry more than algo.Result; else nil
	gcra  *gcraClass  // c, when it is one (a bucket limit with S = 1); else nil
	cost  int64       // c.maxCost(), which check reads on every decision
	gone  atomic.Bool // set when c is retired (class.retire); c reads it too
	used  atomic.Bool // looked up since the sweeper's last visit
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read now from clock instead of its monotonic clock. Times
// before 1970-01-01T00:00:00.000001Z count as that instant: internal/algo's states are
// epoch microseconds, and a state written at the epoch itself could read as a fresh key.
func WithClock(clock func() time.Time) Option {
	return func(s *Store) { s.clock = func() int64 { return algo.Micros(clock()) } }
}

// WithMaxReservations caps the records of decisions whose cost is to be settled
// (sluice.Request.SettleTTL); 0 (the default) means no cap. A decision allowed while n are
// held keeps no record (ReservationsDropped counts it): its estimate stands.
func WithMaxReservations(n int) Option { return func(s *Store) { s.res.max = n } }

// Reservations returns the settlement records held (see WithMaxReservations).
func (s *Store) Reservations() int {
	s.res.mu.Lock()
	defer s.res.mu.Unlock()
	return len(s.res.m)
}

// ReservationsDropped returns how many allowed decisions kept no settlement record because
// WithMaxReservations were held.
func (s *Store) ReservationsDropped() uint64 { return s.res.dropped.Load() }

// WithMaxKeys caps the number of (key, Limit) states held; 0 (the default) means no cap.
// See the package doc for the eviction rule.
func WithMaxKeys(n int64) Option { return func(s *Store) { s.maxKeys = n } }

// WithSweepInterval sets how often the sweeper visits each shard (default 1s); a full pass
// takes about 8 visits. A non-positive interval disables sweeping altogether: state stays
// until Reset or eviction (for simulations and tests that replay time).
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweepGap = d } }

// WithShards sets the number of shards per Limit (rounded up to a power of two; default
// 256), each about 64 bytes.
func WithShards(n int) Option { return func(s *Store) { s.shards = n } }

// New returns a Store with a background sweeper; Close stops it.
func New(opts ...Option) *Store {
	start := time.Now()
	base := start.UnixMicro()
	s := &Store{
		clock:    func() int64 { return base + time.Since(start).Microseconds() },
		shards:   256,
		sweepGap: time.Second,
		seed:     maphash.MakeSeed(),
		mseed:    uintptr(rand.Uint64()),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	n := 1
	for n < s.shards {
		n <<= 1
	}
	s.shards = n
	empty := map[sluice.Limit]*classRef{}
	s.classes.Store(&empty)
	s.list.Store(new([]*classRef))
	if s.sweepGap > 0 {
		go s.sweepLoop()
	} else {
		close(s.stopped)
	}
	return s
}

// Close stops the sweeper. Decisions after Close return ErrClosed.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
		<-s.stopped
	}
	return nil
}

// Len returns the number of (key, Limit) states held. Without MaxKeys it takes each
// shard's lock in turn.
func (s *Store) Len() int {
	if s.maxKeys > 0 {
		return int(s.keys.Load())
	}
	n := int64(0)
	for _, r := range *s.list.Load() {
		n += r.c.len()
	}
	return int(n)
}

// count adds d to a shard's count of states, c, with the shard's lock held, and to the
// store's under MaxKeys (only then, so that an insert writes no shared line).
func (s *Store) count(c *int64, d int64) {
	*c += d
	if s.maxKeys > 0 {
		s.keys.Add(d)
	}
}

// MaxKeys returns the cap set by WithMaxKeys (0: none).
func (s *Store) MaxKeys() int64 { return s.maxKeys }

// Evictions returns how many states have been evicted to keep the store under MaxKeys.
func (s *Store) Evictions() uint64 { return s.evicted.Load() }

// hash is key's 64-bit hash under the store's random seed: the runtime's memhash, which
// maphash.String reaches through two more calls, where a uintptr is 64 bits wide.
func (s *Store) hash(key string) uint64 {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		return maphash.String(s.seed, key)
	}
	return uint64(memhash(unsafe.Pointer(unsafe.StringData(key)), s.mseed, uintptr(len(key))))
}

// memhash is the runtime's hash of n bytes at p. The runtime keeps this linkname and its
// signature for the packages that use it (runtime/alg.go, go.dev/issue/67401).
//
//go:linkname memhash runtime.memhash
//go:noescape
func memhash(p unsafe.Pointer, seed, n uintptr) uintptr

// now is the time decisions are made at: the clock, at most maxMicros, but never earlier
// than the latest sweep's time, so that a clock that steps back (WithClock) never sees
// swept state missing while it still counted. internal/algo never grants more at an
// earlier time than at a later one, so sweeping stays invisible.
func (s *Store) now() int64 {
	return max(min(s.clock(), maxMicros), s.sweptAt.Load())
}

// sweepAt returns the time an insert's sweep of a full shard deletes state as of: the
// latest sweep time, moved up to now only once it lags by more than sweepLag, so that
// inserts rarely write the store-wide sweptAt.
func (s *Store) sweepAt(now int64) int64 {
	if sw := s.sweptAt.Load(); now-sw <= sweepLag {
		return sw
	}
	s.sweepTime(now)
	return now
}

const sweepLag = 100 // µs

// sweepTime records that a sweep deletes state as of now.
func (s *Store) sweepTime(now int64) {
	for {
		sw := s.sweptAt.Load()
		if now <= sw || s.sweptAt.CompareAndSwap(sw, now) {
			return
		}
	}
}

// class returns the shards for *limit, creating them on first use or after retireIdle.
// Only a valid limit gets a class, so finding one proves the limit valid.
func (s *Store) class(limit *sluice.Limit) (*classRef, error) {
	r := s.last.Load()
	if r == nil || !sameLimit(&r.limit, limit) || r.gone.Load() {
		var ok bool
		r, ok = (*s.classes.Load())[*limit]
		if !ok || r.gone.Load() {
			if err := limit.Validate(); err != nil {
				return nil, err
			}
			r = s.addClass(*limit)
		}
		s.last.Store(r)
	}
	if !r.used.Load() {
		r.used.Store(true)
	}
	return r, nil
}

// sameLimit is *a == *b written out so that the compiler inlines it
// (TestSameLimitIsEquality keeps it complete).
func sameLimit(a, b *sluice.Limit) bool {
	return a.Rate == b.Rate && a.Period == b.Period && a.Burst == b.Burst &&
		a.Algorithm == b.Algorithm && a.Lease == b.Lease && a.Calendar == b.Calendar
}

// addClass returns limit's live class, making it if there is none.
func (s *Store) addClass(limit sluice.Limit) *classRef {
	s.addMu.Lock()
	defer s.addMu.Unlock()
	old := *s.classes.Load()
	if r, ok := old[limit]; ok && !r.gone.Load() {
		return r
	}
	r := &classRef{limit: limit}
	r.c = newClass(s, limit, s.nextID, &r.gone)
	r.more, _ = r.c.(outcomer)
	r.gcra, _ = r.c.(*gcraClass)
	r.cost = r.c.maxCost()
	s.nextID++
	next := maps.Clone(old)
	next[limit] = r
	list := append(slices.Clone(*s.list.Load()), r)
	s.list.Store(&list)
	s.classes.Store(&next)
	return r
}

// retireIdle retires r's class if it holds no state, dropping it from the store (see the
// package doc).
func (s *Store) retireIdle(r *classRef) {
	r.c.retire(func() {
		s.addMu.Lock()
		defer s.addMu.Unlock()
		// By value, not by r.limit: the map may already hold the Limit's next class.
		next := maps.Clone(*s.classes.Load())
		maps.DeleteFunc(next, func(_ sluice.Limit, v *classRef) bool { return v == r })
		list := slices.DeleteFunc(slices.Clone(*s.list.Load()), func(x *classRef) bool { return x == r })
		s.list.Store(&list)
		s.classes.Store(&next)
		s.last.CompareAndSwap(r, nil)
	})
}

// check validates a request against its class: the same errors as store.CheckRequest,
// without re-validating a limit that already has a class.
func (s *Store) check(key string, limit *sluice.Limit, n int64) (*classRef, error) {
	if r := s.last.Load(); r != nil && store.ValidKey(key) &&
		sameLimit(&r.limit, limit) && !r.gone.Load() && r.used.Load() && n >= 0 && n <= r.cost {
		return r, nil
	}
	return s.checkClass(key, limit, n)
}

// checkClass is check beyond the class last used.
func (s *Store) checkClass(key string, limit *sluice.Limit, n int64) (*classRef, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, err
	}
	r, err := s.class(limit)
	if err != nil {
		return nil, err
	}
	if n < 0 || n > r.cost {
		return nil, store.CheckRequest(key, *limit, n)
	}
	return r, nil
}

// AllowN is Decide of one request.
func (s *Store) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (d sluice.Decision, err error) {
	r, err := s.check(key, &limit, n)
	if err != nil {
		return sluice.Decision{}, err
	}
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	if r.more != nil { // a class whose decisions carry more than algo.Result
		o := r.more.outcome(key, s.hash(key), s.now(), n, true, false)
		if r.gone.Load() || s.maxKeys > 0 {
			return s.afterDecide(ctx, r, key, limit, n, o)
		}
		o.Fill(&d, &limit)
		return d, nil
	}
	var res algo.Result
	if g := r.gcra; g != nil {
		res = g.decide(key, s.hash(key), s.now(), n) // the commonest class, called directly
	} else {
		res = r.c.decide(key, s.hash(key), s.now(), n)
	}
	if r.gone.Load() || s.maxKeys > 0 {
		return s.afterDecide(ctx, r, key, limit, n, algo.Outcome{Result: res})
	}
	res.Fill(&d, &limit)
	return d, nil
}

// afterDecide is AllowN's rare work: deciding again if the class was retired meanwhile,
// and eviction over MaxKeys.
func (s *Store) afterDecide(ctx context.Context, r *classRef, key string, limit sluice.Limit, n int64, o algo.Outcome) (sluice.Decision, error) {
	if r.gone.Load() {
		return s.AllowN(ctx, key, limit, n)
	}
	if s.keys.Load() > s.maxKeys {
		s.evictOver(classKey{r, key})
	}
	return o.Decision(limit), nil
}

// decideLocked decides with the shard lock held, through the class's outcome when it has
// one; it spends only if commit.
func (r *classRef) decideLocked(key string, h uint64, now, n int64, commit bool) algo.Outcome {
	if r.more != nil {
		return r.more.outcome(key, h, now, n, commit, true)
	}
	return algo.Outcome{Result: r.c.decideLocked(key, h, now, n, commit)}
}

// victim is the entry eviction has found closest to empty so far, and its class.
type victim struct {
	cur  *classRef // the class whose shard is being sampled
	r    *classRef
	key  string
	exp  int64
	skip []classKey // the states the evicting decision has just written
}

type classKey struct {
	r   *classRef
	key string
}

// offer proposes a key of the class being sampled, whose state expires at exp.
func (v *victim) offer(key string, exp int64) {
	if v.r != nil && exp >= v.exp {
		return
	}
	for _, k := range v.skip {
		if k.r == v.cur && k.key == key {
			return
		}
	}
	v.r, v.key, v.exp = v.cur, key, exp
}

// evictOver evicts until the store holds at most MaxKeys states (see the package doc),
// sparing the states in skip, one shard lock at a time.
func (s *Store) evictOver(skip ...classKey) {
	list := *s.list.Load()
	shards := len(list) * s.shards
	for shards > 0 && s.keys.Load() > s.maxKeys {
		best := victim{skip: skip}
		for probed, offered := 0, 0; probed < shards && offered < 8; probed++ {
			k := int(s.evictAt.Add(1) % uint64(shards))
			best.cur = list[k%len(list)]
			offered += best.cur.c.sample(k/len(list), &best, 8-offered)
		}
		if best.r == nil {
			return // nothing evictable: the keys were deleted meanwhile, or are all spared
		}
		if best.r.c.reset(best.key, s.hash(best.key)) {
			s.evicted.Add(1)
		}
	}
}

// Reset implements sluice.Limiter.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	r, err := s.check(key, &limit, 0)
	if err != nil {
		return err
	}
	r.c.reset(key, s.hash(key))
	return nil
}

// Release implements sluice.Limiter.
func (s *Store) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	if err := store.CheckRelease(key, limit, lease); err != nil {
		return false, err
	}
	r, err := s.class(&limit)
	if err != nil {
		return false, err
	}
	if s.closed.Load() {
		return false, sluice.ErrClosed
	}
	return release(r.c, key, s.hash(key), s.now(), uint64(lease)), nil
}

// Decide implements sluice.Limiter: the requests are decided under the locks of all their
// shards, and spent only if every one fits. The memory store never fails.
func (s *Store) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if len(reqs) == 1 && reqs[0].SettleTTL == 0 && len(ds) > 0 { // TestDecideOneAgainstGeneral
		d, err := s.AllowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
		if err != nil {
			return sluice.Report{}, err
		}
		ds[0] = d
	} else if err := s.decideMulti(ctx, reqs, ds); err != nil {
		return sluice.Report{}, err
	}
	return sluice.Report{StoreCalled: true}, nil
}

func (s *Store) decideMulti(ctx context.Context, reqs []sluice.Request, out []sluice.Decision) error {
	if len(out) < len(reqs) {
		return store.CheckRequests(reqs, out)
	}
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	type item struct {
		r  *classRef
		h  uint64
		sh int // global lock order
	}
	items := make([]item, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		ref, err := s.check(r.Key, &r.Limit, r.N)
		if err != nil || store.CheckSettleTTL(r.Limit, r.SettleTTL) != nil {
			return store.CheckRequests(reqs, out) // the same checks, with the request's index
		}
		h := s.hash(r.Key)
		items[i] = item{r: ref, h: h, sh: ref.c.id()*s.shards + ref.c.shardIndex(h)}
	}
	if err := store.CheckDistinct(reqs); err != nil {
		return err
	}
	order := slices.Clone(items) // one per shard, in lock order
	slices.SortFunc(order, func(a, b item) int { return a.sh - b.sh })
	order = slices.CompactFunc(order, func(a, b item) bool { return a.sh == b.sh })
	for _, it := range order {
		it.r.c.lock(it.h)
	}
	unlock := func() {
		for _, it := range order {
			it.r.c.unlock(it.h)
		}
	}
	for _, it := range items {
		// Retirement takes every shard lock of a class, so with ours held this is stable.
		if it.r.gone.Load() {
			unlock()
			return s.decideMulti(ctx, reqs, out) // on the Limits' new classes
		}
	}
	defer func() {
		unlock()
		if s.maxKeys > 0 && s.keys.Load() > s.maxKeys {
			skip := make([]classKey, len(items))
			for i, it := range items {
				skip[i] = classKey{it.r, reqs[i].Key}
			}
			s.evictOver(skip...)
		}
	}()
	now := s.now()
	all := true
	for i, it := range items {
		r := it.r.decideLocked(reqs[i].Key, it.h, now, reqs[i].N, false)
		all = all && r.Allowed
		r.Fill(&out[i], &reqs[i].Limit)
	}
	if !all {
		for i, it := range items {
			if out[i].Allowed { // it would have passed alone: report the state as it is
				r := it.r.decideLocked(reqs[i].Key, it.h, now, 0, false)
				r.Fill(&out[i], &reqs[i].Limit)
				out[i].RetryAfter = 0
			}
			out[i].Allowed = false
		}
		return nil
	}
	for i, it := range items {
		if reqs[i].N > 0 {
			r := it.r.decideLocked(reqs[i].Key, it.h, now, reqs[i].N, true)
			r.Fill(&out[i], &reqs[i].Limit)
			if reqs[i].SettleTTL > 0 {
				out[i].Reservation = s.res.record(&reqs[i], now, r.Result)
			}
		}
	}
	return nil // the deferred unlock, then evictOver
}

func (s *Store) sweepLoop() {
	defer close(s.stopped)
	t := time.NewTicker(s.sweepGap)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep is one tick of the sweeper (see the package doc).
func (s *Store) sweep() {
	s.res.sweep(s.now())
	for _, r := range *s.list.Load() {
		now := s.now()
		s.sweepTime(now)
		live := r.c.sweep(now)
		if used := r.used.Swap(false); live == 0 && !used {
			s.retireIdle(r)
		}
	}
}

var _ sluice.Limiter = (*Store)(nil)
