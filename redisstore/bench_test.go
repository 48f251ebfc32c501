package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

const benchKeys = 100_000

var benchKeyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// benchKey spreads consecutive decisions over the key space.
func benchKey(i int) string { return benchKeyNames[uint64(i)*11400714819323198485%benchKeys] }

// BenchmarkAllowN decides on 100k prewarmed keys from 2 and 64 goroutines against one
// redis-server, for every algorithm, with coalescing (the default) and without
// (WithBatchSize(1)). Besides ns/op it reports decisions/s, p50/p99 latency, the Redis
// server time per decision and the decisions per script call (INFO commandstats).
//
//	go test -run '^$' -bench BenchmarkAllowN -benchtime 200000x ./redisstore
func BenchmarkAllowN(b *testing.B) {
	srv := redistest.Start(b)
	for _, cfg := range []struct{ batch, conc int }{{128, 2}, {1, 2}} {
		batch := cfg.batch
		s := open(b, srv.URL(), WithBatchSize(batch), WithConcurrency(cfg.conc))
		for _, a := range store.Algorithms() {
			limit := sluice.Limit{Algorithm: a, Rate: 1000, Period: time.Second}
			if a == sluice.SlidingLog {
				limit.Rate = 100
			}
			prewarm(b, s, limit)
			for _, g := range []int{2, 64} {
				b.Run(fmt.Sprintf("batch=%d/conc=%d/%v/goroutines=%d", batch, cfg.conc, a, g), func(b *testing.B) {
					runBench(b, srv, g, func(ctx context.Context, i int) error {
						_, err := s.AllowN(ctx, benchKey(i), limit, 1)
						return err
					})
				})
			}
		}
	}
}

// prewarm makes one decision on every key.
func prewarm(b *testing.B, s *Store, limit sluice.Limit) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < benchKeys; i = int(next.Add(1)) - 1 {
				if _, err := s.AllowN(context.Background(), benchKeyNames[i], limit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// runBench runs b.N decisions over g goroutines and reports decisions/s, p50-µs, p99-µs,
// srv-µs/decision (script time from INFO commandstats) and decisions/call.
func runBench(b *testing.B, srv *redistest.Server, g int, decide func(context.Context, int) error) {
	ctx := context.Background()
	srv.MustDo("CONFIG", "RESETSTAT")
	lat := make([][]time.Duration, g)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < g; w++ {
		lat[w] = make([]time.Duration, 0, b.N/g+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				t0 := time.Now()
				if err := decide(ctx, i); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
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
	calls, usec := srv.ScriptStats()
	b.ReportMetric(usec/float64(b.N), "srv-µs/decision")
	b.ReportMetric(float64(b.N)/float64(max(calls, 1)), "decisions/call")
}

// BenchmarkClientSide measures the client-side work per decision that needs no Redis:
// the limit's derived info, and building one script call's keys and repeat check for a
// batch of 40 decisions (the batches the service sees carry 17-45).
//
//	go test -run '^$' -bench BenchmarkClientSide ./redisstore
func BenchmarkClientSide(b *testing.B) {
	s := newStore(options{prefix: DefaultPrefix})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Second}
	b.Run("info", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.info(limit)
		}
	})
	envoyKeys := make([]string, 4096)
	for i := range envoyKeys {
		envoyKeys[i] = "envoy/bench/client=c" + strconv.Itoa(i*7919%100_000) // as the service builds them
	}
	for _, ids := range []struct {
		name string
		key  func(int) string
	}{
		{"keys", benchKey},
		{"envoy-keys", func(i int) string { return envoyKeys[i%len(envoyKeys)] }},
	} {
		b.Run(ids.name, func(b *testing.B) {
			li := s.info(limit)
			var kb []byte
			var ends []int
			var keys []string
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				kb, ends, keys = kb[:0], ends[:0], keys[:0]
				for j := range 40 {
					kb = s.appendKey(kb, ids.key(i*40+j), li.tail)
					ends = append(ends, len(kb))
				}
				start := 0
				for _, end := range ends {
					keys = append(keys, bytesString(kb[start:end]))
					start = end
				}
				if repeats(keys) {
					b.Fatal("repeats")
				}
			}
		})
	}
}

// BenchmarkCallers measures a decision's client-side cost from 1, 4 and 64 callers
// deciding concurrently through one Store on one redis-server: what the store spends
// per decision on coalescing, its batch goroutines and their calls' contexts, besides
// building the call. The callers' context has a deadline, as a service's has. Run it under callgrind for instructions per decision (take the
// difference of two -test.benchtime counts, which cancels the setup).
//
//	go test -run '^$' -bench BenchmarkCallers -benchmem ./redisstore
func BenchmarkCallers(b *testing.B) {
	srv := redistest.Start(b, redistest.WithConfig("hz", "100"))
	s := open(b, srv.URL())
	limit := sluice.PerSecond(1_000_000)
	for _, callers := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			// A deadline, as the service's decisions have (failover's): the store's
			// calls then end at their callers' latest deadline.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			cs0, cpu0 := procstat.ContextSwitches(b), procstat.CPU()
			b.ResetTimer()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
						if _, err := s.AllowN(ctx, benchKey(i), limit, 1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(procstat.ContextSwitches(b)-cs0)/float64(b.N), "ctxsw/op")
			b.ReportMetric(float64((procstat.CPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkDecideOne decides one request per call through Decide from one caller, as the
// service's evaluator calls the store at low load: every script call carries one key.
// Besides runBench's figures it reports the allocations and the process's CPU time per
// decision (the client's work, with the Go runtime's).
//
//	go test -run '^$' -bench BenchmarkDecideOne -benchmem -benchtime 20000x ./redisstore
func BenchmarkDecideOne(b *testing.B) {
	srv := redistest.Start(b)
	s := open(b, srv.URL())
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow} {
		limit := sluice.Limit{Algorithm: a, Rate: 1_000_000, Period: time.Second}
		b.Run(a.String(), func(b *testing.B) {
			reqs, ds := make([]sluice.Request, 1), make([]sluice.Decision, 1)
			b.ReportAllocs()
			cpu0 := procstat.CPU()
			runBench(b, srv, 1, func(ctx context.Context, i int) error {
				reqs[0] = sluice.Request{Key: benchKeyNames[i%1000], Limit: limit, N: 1}
				_, err := s.Decide(ctx, reqs, ds)
				return err
			})
			b.ReportMetric(float64((procstat.CPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkRepeats is the repeated-key check of one script call of 40 distinct keys.
//
//	go test -run '^$' -bench BenchmarkRepeats ./redisstore
func BenchmarkRepeats(b *testing.B) {
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "sluice:{" + benchKey(i) + "}:g1000:1000000"
	}
	b.ReportAllocs()
	for b.Loop() {
		if repeats(keys) {
			b.Fatal("repeats")
		}
	}
}
