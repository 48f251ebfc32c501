package denycache

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// denyAll denies every request for an hour.
type denyAll struct{}

func (denyAll) Decide(_ context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	for i := range reqs {
		ds[i] = sluice.Decision{Limit: reqs[i].Limit, RetryAfter: time.Hour}
	}
	return sluice.Report{StoreCalled: true}, nil
}
func (denyAll) Reserve(_ context.Context, _ string, l sluice.Limit, n int64) (sluice.Reservation, error) {
	return sluice.Reservation{Limit: l, N: n, Delay: time.Hour}, nil
}
func (denyAll) Reset(context.Context, string, sluice.Limit) error { return nil }
func (denyAll) Settle(context.Context, string, sluice.Limit, sluice.ReservationID, int64) (sluice.Decision, error) {
	return sluice.Decision{}, nil
}

func (denyAll) Release(context.Context, string, sluice.Limit, sluice.LeaseID) (bool, error) {
	return false, nil
}

// BenchmarkEntryBytes reports the heap an entry takes beyond its key's bytes (the key
// strings are allocated first), to check EntryOverhead against:
//
//	go test ./denycache -run '^$' -bench EntryBytes
func BenchmarkEntryBytes(b *testing.B) {
	const n = 200000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	ctx, limit := context.Background(), sluice.PerSecond(1)
	var perEntry float64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		c := New(denyAll{}, WithMaxBytes(1<<40))
		for _, k := range keys {
			c.AllowN(ctx, k, limit, 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		perEntry = float64(m1.HeapInuse-m0.HeapInuse) / n
		runtime.KeepAlive(c)
	}
	runtime.KeepAlive(keys)
	b.ReportMetric(perEntry, "B/entry")
}

// BenchmarkHit is a cached denial; BenchmarkMiss an allowed decision of the in-memory
// store passing through a Cache that holds another key's denial, and the same decision
// without the Cache.
func BenchmarkHit(b *testing.B) {
	c := New(denyAll{}, WithMaxAge(time.Hour))
	ctx, limit := context.Background(), sluice.PerSecond(1)
	c.AllowN(ctx, "client:1", limit, 1)
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := c.AllowN(ctx, "client:1", limit, 1); d.Path != sluice.PathCache {
			b.Fatal("not cached")
		}
	}
}

func BenchmarkMiss(b *testing.B) {
	m := memory.New()
	defer m.Close()
	c := New(m)
	ctx, limit := context.Background(), sluice.PerSecond(1)
	c.AllowN(ctx, "other", limit, 1)
	c.AllowN(ctx, "other", limit, 1)
	if c.Len() != 1 {
		b.Fatal("no denial held")
	}
	big := sluice.Limit{Rate: 1e6, Period: time.Second, Burst: 1e9}
	for _, bc := range []struct {
		name string
		lim  interface {
			AllowN(context.Context, string, sluice.Limit, int64) (sluice.Decision, error)
		}
	}{{"cache", c}, {"store-alone", m}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := bc.lim.AllowN(ctx, "client:1", big, 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
