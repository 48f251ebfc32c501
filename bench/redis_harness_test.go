package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisKeys is the number of distinct keys the Redis benchmarks spread decisions over.
const redisKeys = 100_000

// redisGoroutines are the concurrency levels every Redis benchmark runs at.
var redisGoroutines = []int{2, 64}

// redisRounds is how many times the comparisons run each entry, interleaved.
const redisRounds = 3

// decideFunc makes decision number i (keys are chosen from i); it returns an error only
// when the store failed.
type decideFunc func(ctx context.Context, i int) error

// runRedis runs b.N decisions spread over g goroutines against srv and reports, besides
// ns/op: decisions/s, p50 and p99 latency in µs, the Redis server time per decision and
// decisions per call from INFO commandstats (reset before the timed part), and the server's
// CPU time per decision from INFO cpu.
func runRedis(b *testing.B, srv *redistest.Server, g int, decide decideFunc) {
	b.Helper()
	settleRedis(b, srv)
	ctx := context.Background()
	// A short warm-up opens connections and loads scripts outside the measurement.
	for i := 0; i < 2*g; i++ {
		if err := decide(ctx, i); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	srv.MustDo("CONFIG", "RESETSTAT")
	cpu0, err := serverCPU(srv)
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}

	lat := make([][]time.Duration, g)
	per := b.N/g + 1
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < g; w++ {
		lat[w] = make([]time.Duration, 0, per)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := decide(ctx, i); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("decision failed: %v", err)
	}

	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")

	cpu1, err := serverCPU(srv)
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	calls, usec, err := commandStats(srv)
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	b.ReportMetric(usec/float64(b.N), "srv-µs/decision")
	b.ReportMetric(float64(b.N)/float64(max(calls, 1)), "decisions/call")
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "srv-cpu-µs/decision")
}

// settleRedis waits until redis-server has stopped expiring keys (INFO stats expired_keys
// unchanged for 300 ms; at most 5 s). The entry before may have written keys that live
// for up to a second (redis_rate's TTLs are whole seconds, ulule's windows are one
// second); Redis expires them in its periodic task, which would otherwise run during this
// entry and be charged to it: sluice's GCRA, measured right after ulule, lost a third of
// its throughput that way.
func settleRedis(b *testing.B, srv *redistest.Server) {
	b.Helper()
	expired := func() string {
		info, err := srv.Do("INFO", "stats")
		if err != nil {
			b.Fatalf("INFO stats: %v", err)
		}
		v, err := redistest.InfoField(info, "expired_keys")
		if err != nil {
			b.Fatalf("INFO stats: %v", err)
		}
		return v
	}
	last, since := expired(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if v := expired(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= 300*time.Millisecond {
			return
		}
	}
}

// serverCPU is the CPU time redis-server has used (user + sys, seconds, from INFO cpu). Its
// growth per decision includes the network work that commandstats leaves out, and unlike
// commandstats it does not count time the process spent waiting for a CPU on a busy
// machine.
func serverCPU(srv *redistest.Server) (float64, error) {
	reply, err := srv.Do("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := redistest.InfoField(reply, f)
		if err != nil {
			return 0, err
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, err
		}
		total += x
	}
	return total, nil
}

// commandStats sums calls and usec over INFO commandstats for the commands clients sent.
// Redis also counts the commands a script runs (redis.call) and includes their time in the
// script's own usec, so when any script ran only the script commands are summed.
func commandStats(srv *redistest.Server) (calls int64, usec float64, err error) {
	stats, err := srv.CommandStats()
	if err != nil {
		return 0, 0, err
	}
	isScript := func(name string) bool {
		return strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall")
	}
	scripts := false
	for name := range stats {
		scripts = scripts || isScript(name)
	}
	for name, st := range stats {
		switch name {
		case "info", "config|resetstat", "ping", "hello", "client|setinfo", "client|tracking":
			continue
		}
		if scripts && !isScript(name) {
			continue
		}
		calls += st.Calls
		usec += st.Usec
	}
	return calls, usec, nil
}

// benchKey is the key of decision i, spread over redisKeys keys.
func benchKey(i int) string {
	// A multiplicative hash spreads consecutive decisions over the key space, so
	// concurrent goroutines rarely hit the same key.
	return "user:" + strconv.Itoa(int(uint64(i)*11400714819323198485%redisKeys))
}
