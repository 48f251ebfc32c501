package failover

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkOverhead measures what the decorator adds to a decision (a goroutine per store
// call and a timer unless inline, the breaker) over the store it wraps: the memory store,
// where it dominates, and the Redis store, where it should not.
//
//	go test ./failover -run '^$' -bench Overhead -benchmem
func BenchmarkOverhead(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	limit := sluice.PerSecond(100_000)
	for _, bc := range []struct {
		name  string
		store func(b *testing.B) sluice.Limiter
		wrap  []Option // nil: not wrapped
	}{
		{"memory", benchMemory, nil},
		{"failover(memory)", benchMemory, []Option{}},
		{"failover-inline(memory)", benchMemory, []Option{WithInlineCalls()}},
		{"redis", benchRedis, nil},
		{"failover(redis)", benchRedis, []Option{}},
		{"failover-inline(redis)", benchRedis, []Option{WithInlineCalls()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lim := bc.store(b)
			if bc.wrap != nil {
				// A generous deadline: this measures the happy path's cost.
				f := New(lim, append(bc.wrap, WithDeadline(time.Second))...)
				defer f.Close()
				lim = f
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if d, err := sluice.AllowN(ctx, lim, keys[i&1023], limit, 1); err != nil || d.Path != sluice.PathStore {
						b.Error(d, err)
						return
					}
					i++
				}
			})
		})
	}
}

func benchMemory(b *testing.B) sluice.Limiter {
	s := memory.New()
	b.Cleanup(func() { s.Close() })
	return s
}

func benchRedis(b *testing.B) sluice.Limiter {
	srv := redistest.Start(b)
	s, err := redisstore.Open(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkDecide measures an inline decision through the decorator on the memory store,
// one caller: the deadline context, the breaker and the bookkeeping around the store call.
// Run it under callgrind for instructions per decision.
//
//	go test ./failover -run '^$' -bench BenchmarkDecide -benchmem
func BenchmarkDecide(b *testing.B) {
	l := New(benchMemory(b), WithInlineCalls(), WithDeadline(time.Second))
	defer l.Close()
	ctx := context.Background()
	reqs := []sluice.Request{{Key: "user:1", Limit: sluice.PerSecond(1_000_000), N: 1}}
	ds := make([]sluice.Decision, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Decide(ctx, reqs, ds); err != nil || ds[0].Path != sluice.PathStore {
			b.Fatal(ds[0], err)
		}
	}
}
