package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkRedisPaced measures latency at half of peak throughput, open loop: it first
// finds the library's peak (64 goroutines, closed loop, 100k decisions), then releases
// decisions at half that rate (a batch every millisecond) to 512 workers for b.N decisions,
// and reports the achieved rate and the p50/p99/p99.9 latency measured from the moment each
// decision is released (so waiting for a free worker counts, and a slow store cannot slow
// the schedule down: no coordinated omission).
//
//	go test -run '^$' -bench BenchmarkRedisPaced -benchtime 200000x
func BenchmarkRedisPaced(b *testing.B) {
	srv := redistest.Start(b, redistest.WithConfig("maxmemory-policy", "noeviction"))
	for _, lib := range redisLibs() {
		switch lib.name {
		case "redis_rate", "sluice-gcra", "sluice-token_bucket", "sluice-fixed_window":
		default:
			continue
		}
		decide, closeFn := lib.open(b, srv)
		prewarmRedis(b, decide)
		peak := closedLoopRate(b, decide, 64, 100_000)
		b.Run(fmt.Sprintf("lib=%s/rate=half-peak", lib.name), func(b *testing.B) {
			runPaced(b, decide, peak/2)
			b.ReportMetric(peak, "peak-decisions/s")
		})
		closeFn()
		srv.MustDo("FLUSHALL")
	}
}

// closedLoopRate returns the decisions/s that g goroutines reach making n decisions.
func closedLoopRate(b *testing.B, decide decideFunc, g, n int) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := decide(context.Background(), i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

func runPaced(b *testing.B, decide decideFunc, rate float64) {
	const workers = 512
	type job struct {
		i   int
		due time.Time
	}
	jobs := make(chan job, 1<<16)
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := decide(context.Background(), j.i); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(j.due))
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for sent < b.N {
		now := <-tick.C
		// Release what the schedule owes by now (ticks can be late on a busy machine).
		owed := min(int(rate*now.Sub(start).Seconds()), b.N)
		for ; sent < owed; sent++ {
			jobs <- job{i: sent, due: now}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(pct(0.999), "p99.9-µs")
}
