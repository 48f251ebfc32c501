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

	"github.com/sluicehq/sluice/bench/internal/lean"
	"github.com/sluicehq/sluice/internal/redistest"
)

var redisHzFlag = flag.String("redis-hz", "10,100", "BenchmarkRedisPaced: the redis-server hz values to run at, comma-separated")

// BenchmarkRedisPaced measures latency at half of peak throughput, open loop: it first
// finds the library's peak (64 goroutines, closed loop, 100k decisions), then schedules b.N
// decisions at half that rate over 512 workers, and reports the achieved rate and the
// p50/p99/p99.9 latency measured from each decision's scheduled time when its worker was
// busy past it (so lateness caused by slow decisions counts: no coordinated omission), and
// from the worker's wake-up otherwise (so the timer's own overshoot does not).
//
// Beside the libraries it runs the yardstick (package lean: a minimal integer GCRA
// script, 16 decisions per call, through the same kind of batcher): the tail that a
// store doing the least Redis work per decision shows on the same machine and server.
//
// It runs everything twice: on a redis-server with the default hz 10, and with hz 100
// (-redis-hz sets the list).
// Every decision writes a key that expires soon after (its TTL is the time until its state
// is empty), and Redis's periodic task (serverCron, hz times a second: expiry, rehashing of
// the churning key space) then holds the server for a millisecond or more every 100 ms at
// hz 10, which is where the p99 comes from; at hz 100 the same work comes in ten times
// smaller pieces.
//
//	go test -run '^$' -bench BenchmarkRedisPaced -benchtime 200000x
func BenchmarkRedisPaced(b *testing.B) {
	for _, hz := range strings.Split(*redisHzFlag, ",") {
		srv := redistest.Start(b, redistest.WithConfig("maxmemory-policy", "noeviction"), redistest.WithConfig("hz", hz))
		for _, lib := range redisLibs() {
			switch lib.name {
			case "redis_rate", lean.Name, "sluice-gcra", "sluice-token_bucket", "sluice-fixed_window":
			default:
				continue
			}
			decide, closeFn := lib.open(b, srv)
			prewarmRedis(b, decide)
			peak := closedLoopRate(b, decide, 64, 100_000)
			b.Run(fmt.Sprintf("hz=%s/lib=%s/rate=half-peak", hz, lib.name), func(b *testing.B) {
				settleRedis(b, srv)
				runPaced(b, decide, peak/2)
				b.ReportMetric(peak, "peak-decisions/s")
			})
			closeFn()
			srv.MustDo("FLUSHALL")
		}
		srv.Kill()
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
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now().Add(time.Millisecond)
	// Decision i is due at start + i/rate. Worker w makes decisions w, w+workers, ...: it
	// sleeps until one is due (or starts at once if it is late) and measures from the due
	// time, so a slow decision delays the ones behind it in the measurement, not in the
	// schedule.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += workers {
				due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				from := due
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
					// A sleep overshoots by up to a millisecond (the runtime's timer
					// granularity): measure from the wake-up, not from the due time.
					from = time.Now()
				}
				if err := decide(context.Background(), i); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(from))
			}
		}()
	}
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
