package bench

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// The limit every library is given, as far as its model can say it: one unit per second
// with a burst of memBurst, i.e. memBurst units over memBurst seconds. No run comes near
// spending memBurst units on one key, so every decision is an admission that writes state.
//
// Keys are prewarmed with a cost of memWarmCost so that a bucket's state stays live (not
// equivalent to empty, hence never swept) for an hour whatever the traffic on the key:
// a state that empties within the run is swept and re-created, and the benchmark would then
// measure inserts instead of decisions (see memory/bench_test.go, benchLimit).
const (
	memBurst    = 1_000_000_000
	memPeriod   = memBurst * time.Second // the window libraries' window
	memWarmCost = 3600
)

// memLimiter is one library's in-process limiter behind the one call the benchmarks make.
type memLimiter interface {
	// allow decides one unit for key now.
	allow(ctx context.Context, key string) (bool, error)
	// warm creates key's state, as the first decisions on a key would.
	warm(ctx context.Context, key string) error
	close()
}

// memLib names a library and makes a fresh limiter of it.
type memLib struct {
	name string
	new  func() (memLimiter, error)
	// mayDeny is set for a limit that cannot be made unexhaustible (sluice's SlidingLog
	// keeps at most store.MaxLogRate timestamps).
	mayDeny bool
}

// memLibs lists sluice's memory store for each algorithm, the floor, then the peers.
func memLibs() []memLib {
	var libs []memLib
	for _, alg := range store.Algorithms() {
		libs = append(libs, memLib{
			name:    "sluice-" + alg.String(),
			new:     func() (memLimiter, error) { return newSluiceMem(alg) },
			mayDeny: alg == sluice.SlidingLog,
		})
	}
	return append(libs,
		memLib{name: "floor", new: newFloor},
		memLib{name: "floor-cas", new: newFloorCAS},
		memLib{name: "x-time-rate", new: newXRate},
		memLib{name: "sethvargo", new: newSethvargo},
		memLib{name: "ulule", new: newUlule},
		memLib{name: "throttled", new: newThrottled},
	)
}

// sluiceMemLimit is the benchmark limit for alg in sluice's terms.
func sluiceMemLimit(alg sluice.Algorithm) sluice.Limit {
	switch alg {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		return sluice.Limit{Algorithm: alg, Rate: 1, Period: time.Second, Burst: memBurst}
	case sluice.SlidingLog:
		// Windows aligned to multiples of memPeriod since the epoch: the next boundary is
		// in 2033, so no run crosses one.
		return sluice.Limit{Algorithm: alg, Rate: store.MaxLogRate, Period: memPeriod}
	}
	return sluice.Limit{Algorithm: alg, Rate: memBurst, Period: memPeriod}
}

// sluiceMem is sluice's memory store with the default options.
type sluiceMem struct {
	s *memory.Store
	l sluice.Limit
}

func newSluiceMem(alg sluice.Algorithm) (memLimiter, error) {
	l := sluiceMemLimit(alg)
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &sluiceMem{s: memory.New(), l: l}, nil
}

func (m *sluiceMem) allow(ctx context.Context, key string) (bool, error) {
	d, err := m.s.AllowN(ctx, key, m.l, 1)
	return d.Allowed, err
}

func (m *sluiceMem) warm(ctx context.Context, key string) error {
	n := int64(1)
	switch m.l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		n = memWarmCost
	}
	d, err := m.s.AllowN(ctx, key, m.l, n)
	if err == nil && !d.Allowed {
		err = fmt.Errorf("warming %q: denied", key)
	}
	return err
}

func (m *sluiceMem) close() { m.s.Close() }

// floor is no limiter: it hashes the key, which reads the key's bytes as every library
// must, and admits. Its ns/op is what the benchmark itself costs at each key count
// (walking the key slice, cache misses on the key headers and bytes, RunParallel).
type floor struct{ seed maphash.Seed }

func newFloor() (memLimiter, error) { return &floor{seed: maphash.MakeSeed()}, nil }

func (f *floor) allow(_ context.Context, key string) (bool, error) {
	return maphash.String(f.seed, key) != 0 || len(key) > 0, nil
}

func (f *floor) warm(ctx context.Context, key string) error { return warmOne(ctx, f, key) }

func (f *floor) close() {}

// floorCAS is no limiter either: it is the least any limiter that keeps state per key must
// do per decision. It hashes the key, reads the clock, and advances one word per key with
// a compare-and-swap (a GCRA TAT with no table lookup, key comparison or limit
// arithmetic). The words are a fixed array of 2^21, chosen by the key's hash (keys that
// collide share one: a floor, not a limiter). Because both benchmark goroutines walk every
// key, each decision's word was last written by the other core: its ns/op is mostly the
// one cache-line transfer per decision that no design can avoid in this benchmark.
type floorCAS struct {
	seed  maphash.Seed
	start time.Time
	words []atomic.Int64
}

func newFloorCAS() (memLimiter, error) {
	return &floorCAS{seed: maphash.MakeSeed(), start: time.Now(), words: make([]atomic.Int64, 1<<21)}, nil
}

func (f *floorCAS) allow(_ context.Context, key string) (bool, error) {
	w := &f.words[maphash.String(f.seed, key)&(1<<21-1)]
	now := int64(time.Since(f.start))
	for {
		old := w.Load()
		if w.CompareAndSwap(old, max(old, now)+1) {
			return true, nil
		}
	}
}

func (f *floorCAS) warm(ctx context.Context, key string) error { return warmOne(ctx, f, key) }

func (f *floorCAS) close() {}

// xRate is golang.org/x/time/rate the way its docs suggest for many keys: a sync.Map of
// *rate.Limiter. It never forgets a key.
type xRate struct{ m sync.Map }

func newXRate() (memLimiter, error) { return &xRate{}, nil }

func (x *xRate) limiter(key string) *rate.Limiter {
	if v, ok := x.m.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := x.m.LoadOrStore(key, rate.NewLimiter(rate.Every(time.Second), memBurst))
	return v.(*rate.Limiter)
}

func (x *xRate) allow(_ context.Context, key string) (bool, error) {
	return x.limiter(key).Allow(), nil
}

func (x *xRate) warm(_ context.Context, key string) error {
	if !x.limiter(key).AllowN(time.Now(), memWarmCost) {
		return fmt.Errorf("warming %q: denied", key)
	}
	return nil
}

func (x *xRate) close() {}

// sethvargoMem is sethvargo/go-limiter's memorystore: memBurst tokens per memPeriod, so one
// per second and never refilled during a run. It sweeps keys idle for 12h (its default).
type sethvargoMem struct{ s sethvargo.Store }

func newSethvargo() (memLimiter, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: memBurst, Interval: memPeriod})
	if err != nil {
		return nil, err
	}
	return &sethvargoMem{s: s}, nil
}

func (m *sethvargoMem) allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := m.s.Take(ctx, key)
	return ok, err
}

func (m *sethvargoMem) warm(ctx context.Context, key string) error { return warmOne(ctx, m, key) }

func (m *sethvargoMem) close() { m.s.Close(context.Background()) }

// ululeMem is ulule/limiter v3 with its memory store: a fixed window of memBurst per
// memPeriod, cleaned every 30s (its default).
type ululeMem struct{ l *ulule.Limiter }

func newUlule() (memLimiter, error) {
	return &ululeMem{l: ulule.New(ululemem.NewStore(), ulule.Rate{Period: memPeriod, Limit: memBurst})}, nil
}

func (m *ululeMem) allow(ctx context.Context, key string) (bool, error) {
	c, err := m.l.Get(ctx, key)
	return !c.Reached, err
}

func (m *ululeMem) warm(ctx context.Context, key string) error { return warmOne(ctx, m, key) }

func (m *ululeMem) close() {}

// throttledMem is throttled/throttled v2's GCRA over its memstore without a key cap (the
// LRU variant serialises every read): one per second, burst memBurst.
type throttledMem struct{ l *throttled.GCRARateLimiterCtx }

func newThrottled() (memLimiter, error) {
	st, err := throttledmem.NewCtx(0)
	if err != nil {
		return nil, err
	}
	// throttled's burst is MaxBurst+1 units.
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(1), MaxBurst: memBurst - 1})
	if err != nil {
		return nil, err
	}
	return &throttledMem{l: l}, nil
}

func (m *throttledMem) allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := m.l.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

func (m *throttledMem) warm(ctx context.Context, key string) error {
	limited, _, err := m.l.RateLimitCtx(ctx, key, memWarmCost)
	if err == nil && limited {
		err = fmt.Errorf("warming %q: denied", key)
	}
	return err
}

func (m *throttledMem) close() {}

// warmOne warms key with one decision, for libraries whose state needs no more to stay live.
func warmOne(ctx context.Context, m memLimiter, key string) error {
	ok, err := m.allow(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("warming %q: denied", key)
	}
	return err
}

// memKeys returns n distinct keys, allocated one by one as a server would receive them.
func memKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	return keys
}
