package memory

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// BenchmarkAllow decides one unit per op on prewarmed keys from parallel goroutines, with a
// limit loose enough that the decision work, not denial, is measured.
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	for _, alg := range store.Algorithms() {
		for _, nkeys := range []int{1, 10_000, 1_000_000} {
			if alg == sluice.SlidingLog && nkeys > 10_000 {
				continue // one timestamp per unit: a million logs is not what it is for
			}
			b.Run(fmt.Sprintf("%v/keys=%d", alg, nkeys), func(b *testing.B) {
				l := benchLimit(alg)
				s := New()
				defer s.Close()
				keys := make([]string, nkeys)
				for i := range keys {
					keys[i] = fmt.Sprintf("user:%08d", i)
					s.AllowN(ctx, keys[i], l, 1)
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, err := s.AllowN(ctx, keys[i%nkeys], l, 1); err != nil {
							b.Fatal(err)
						}
						i += 7919 // a prime stride: no two goroutines walk in step
					}
				})
			})
		}
	}
}

// BenchmarkBytesPerKey reports the heap the store holds per GCRA key at 1M keys, beyond the
// keys' own bytes (allocated before the measurement).
func BenchmarkBytesPerKey(b *testing.B) {
	ctx := context.Background()
	const n = 1_000_000
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket} {
		b.Run(alg.String(), func(b *testing.B) {
			for range b.N {
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("user:%08d", i)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := New(WithSweepInterval(0))
				l := benchLimit(alg)
				for _, k := range keys {
					s.AllowN(ctx, k, l, 1)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
				runtime.KeepAlive(keys)
				runtime.KeepAlive(s)
				s.Close()
			}
		})
	}
}

// benchLimit is a limit that the benchmark never exhausts and whose state stays live (never
// swept) for the whole run, so every decision finds its key.
func benchLimit(alg sluice.Algorithm) sluice.Limit {
	switch alg {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		return sluice.Limit{Algorithm: alg, Rate: 1, Period: 24 * time.Hour, Burst: 10_000}
	case sluice.SlidingLog:
		return sluice.Limit{Algorithm: alg, Rate: store.MaxLogRate, Period: time.Hour}
	}
	return sluice.Limit{Algorithm: alg, Rate: 1 << 40, Period: time.Hour}
}

// BenchmarkDecideOne decides one request per op through Decide, as the evaluator and the
// deny cache call the store, on 10k prewarmed keys of a lock-free class (GCRA) and of a
// locked one (SlidingWindow).
//
//	go test -run '^$' -bench BenchmarkDecideOne -benchmem ./memory
func BenchmarkDecideOne(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimit(alg)
			s := New()
			defer s.Close()
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("user:%08d", i)
				s.AllowN(ctx, keys[i], l, 1)
			}
			reqs, ds := make([]sluice.Request, 1), make([]sluice.Decision, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				reqs[0] = sluice.Request{Key: keys[i%len(keys)], Limit: l, N: 1}
				if _, err := s.Decide(ctx, reqs, ds); err != nil || !ds[0].Allowed {
					b.Fatal(ds[0], err)
				}
				i += 7919
			}
		})
	}
}
