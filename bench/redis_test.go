package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/lean"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

var (
	redisLibsFlag = flag.String("redis-libs", "", "comma-separated libraries the Redis benchmarks open and prewarm (default: all; -bench only filters what runs)")
	redisMinTTL   = flag.Duration("redis-min-ttl", 0, "redisstore.WithMinTTL for sluice's rows of the Redis benchmarks")
	redisConc     = flag.Int("redis-concurrency", 0, "redisstore.WithConcurrency for sluice's rows of the Redis benchmarks (0: the store's default)")
)

// redisLib is one Redis-backed limiter under comparison, deciding 1000 per second per key.
type redisLib struct {
	name string
	open func(b *testing.B, srv *redistest.Server) (decideFunc, func())
}

func redisLibs() []redisLib {
	libs := []redisLib{
		{"redis_rate", func(b *testing.B, srv *redistest.Server) (decideFunc, func()) {
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			l := redis_rate.NewLimiter(c)
			limit := redis_rate.PerSecond(1000)
			return func(ctx context.Context, i int) error {
				_, err := l.Allow(ctx, benchKey(i), limit)
				return err
			}, func() { _ = c.Close() }
		}},
		{"ulule", func(b *testing.B, srv *redistest.Server) (decideFunc, func()) {
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			store, err := ululeredis.NewStore(c)
			if err != nil {
				b.Fatal(err)
			}
			l := ulule.New(store, ulule.Rate{Period: time.Second, Limit: 1000})
			return func(ctx context.Context, i int) error {
				_, err := l.Get(ctx, benchKey(i))
				return err
			}, func() { _ = c.Close() }
		}},
	}
	libs = append(libs, redisLib{lean.Name, func(b *testing.B, srv *redistest.Server) (decideFunc, func()) {
		// The yardstick of the Redis-time target (package lean): not a library.
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		bt, err := lean.NewBatcher(context.Background(), c, lean.Size, 2)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, i int) error {
			return bt.Decide(ctx, benchKey(i))
		}, func() { bt.Close(); c.Close() }
	}})
	for _, a := range store.Algorithms() {
		limit := sluice.Limit{Algorithm: a, Rate: 1000, Period: time.Second}
		if a == sluice.SlidingLog {
			limit.Rate = 100 // one timestamp per unit: keep the log of a hot key small
		}
		libs = append(libs, redisLib{"sluice-" + a.String(), func(b *testing.B, srv *redistest.Server) (decideFunc, func()) {
			opts := []redisstore.Option{redisstore.WithMinTTL(*redisMinTTL)}
			if *redisConc > 0 {
				opts = append(opts, redisstore.WithConcurrency(*redisConc))
			}
			s, err := redisstore.Open(srv.URL(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, i int) error {
				_, err := s.AllowN(ctx, benchKey(i), limit, 1)
				return err
			}, func() { _ = s.Close() }
		}})
	}
	if *redisLibsFlag == "" {
		return libs
	}
	want := strings.Split(*redisLibsFlag, ",")
	var keep []redisLib
	for _, l := range libs {
		if slices.Contains(want, l.name) {
			keep = append(keep, l)
		}
	}
	return keep
}

// BenchmarkRedis runs sluice's Redis store (each algorithm) and go-redis/redis_rate v10 and
// ulule/limiter v3 (Redis store) side by side on one redis-server: 100k prewarmed keys, 2 and
// 64 goroutines, in interleaved rounds. See bench/README.md for the command and the latest
// table.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b, redistest.WithConfig("maxmemory-policy", "noeviction"))
	libs := redisLibs()
	decides := make([]decideFunc, len(libs))
	for i, lib := range libs {
		decide, closeFn := lib.open(b, srv)
		defer closeFn()
		prewarmRedis(b, decide)
		decides[i] = decide
	}
	// Every library's keys stay live side by side (their key prefixes differ); rounds
	// interleave the libraries so that load from elsewhere on the machine hits them alike.
	for round := 0; round < redisRounds; round++ {
		for _, g := range redisGoroutines {
			for i, lib := range libs {
				b.Run(fmt.Sprintf("round=%d/lib=%s/goroutines=%d", round, lib.name, g), func(b *testing.B) {
					runRedis(b, srv, g, decides[i])
				})
			}
		}
	}
}

// prewarmRedis makes one decision on each of the redisKeys keys.
func prewarmRedis(b *testing.B, decide decideFunc) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= redisKeys {
					return
				}
				// benchKey(i) for i < redisKeys covers every key once.
				if err := decide(context.Background(), i); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("prewarm: %v", err)
	}
}
