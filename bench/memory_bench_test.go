package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/procstat"
)

// memStride is the prime step of each goroutine's walk over the keys. It is coprime to every
// key count benchmarked, so a walk visits every key, and with goroutines starting at spread
// offsets no two of them walk in step.
const memStride = 7919

// BenchmarkMemory decides one unit per op from b.RunParallel goroutines on prewarmed keys,
// for sluice's memory store (every algorithm) and each peer library, with the same limit as
// far as each library can express it (see memBurst). Every decision must be an admission;
// the benchmark fails otherwise (except for sluice's SlidingLog, which reports denied/op).
// Besides ns/op it reports the process's CPU time per op (cpu-ns/op, see procstat.CPU).
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 10_000, 1_000_000} {
		keys := memKeys(n)
		for _, lib := range memLibs() {
			var lim memLimiter // built and warmed once, reused by every b.N round
			b.Run(fmt.Sprintf("keys=%d/%s", n, lib.name), func(b *testing.B) {
				if lim == nil {
					var err error
					if lim, err = lib.new(); err != nil {
						b.Fatal(err)
					}
					for _, k := range keys {
						if err := lim.warm(ctx, k); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.GC() // leave no garbage of earlier runs for this one to collect
				cpu0 := procstat.CPU()
				var start, denied atomic.Uint64
				var firstErr atomic.Value // error
				stride := memStride % n
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(start.Add(1) * 0x9E3779B97F4A7C15 % uint64(n))
					var no uint64
					for pb.Next() {
						ok, err := lim.allow(ctx, keys[i])
						if !ok {
							no++
							if err != nil {
								firstErr.CompareAndSwap(nil, errBox{err})
							}
						}
						if i += stride; i >= n {
							i -= n
						}
					}
					denied.Add(no)
				})
				b.StopTimer()
				b.ReportMetric(float64(procstat.CPU()-cpu0)/float64(b.N), "cpu-ns/op")
				if e, _ := firstErr.Load().(errBox); e.err != nil {
					b.Fatal(e.err)
				}
				if d := denied.Load(); d > 0 {
					if !lib.mayDeny {
						b.Fatalf("%d of %d decisions denied: the limit was exhausted, so the run measured denials", d, b.N)
					}
					b.ReportMetric(float64(d)/float64(b.N), "denied/op")
				}
			})
			if lim != nil {
				lim.close()
			}
		}
	}
}

// errBox holds an error in an atomic.Value, which needs one concrete type.
type errBox struct{ err error }

// BenchmarkMemoryBytesPerKey reports the heap each library holds per key after 1M keys were
// warmed: the heap in use after a GC, minus the heap in use before the store was made, with
// the key strings allocated beforehand (so their bytes are not counted unless the library
// copies them).
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	ctx := context.Background()
	const n = 1_000_000
	for _, lib := range memLibs() {
		b.Run(lib.name, func(b *testing.B) {
			for range b.N {
				keys := memKeys(n)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				lim, err := lib.new()
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					if err := lim.warm(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/n, "B/key")
				runtime.KeepAlive(keys)
				runtime.KeepAlive(lim)
				lim.close()
			}
		})
	}
}
