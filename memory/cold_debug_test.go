package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestColdDebug(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestStore(t)
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	l := sluice.PerSecond(100)
	rng := rand.New(rand.NewPCG(1, 2))
	step := func(ops int) {
		for i := range ops {
			if i%2 == 0 {
				clk.Advance(time.Microsecond)
			}
			s.AllowN(ctx, keys[rng.IntN(n)], l, 1)
		}
	}
	step(2_000_000)
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	rebuilds, rebuiltSlots, shrinks = 0, 0, 0
	t0 := time.Now()
	step(2_000_000)
	el := time.Since(t0)
	runtime.ReadMemStats(&b)
	g := (*s.list.Load())[0].c.(*gcraClass)
	tot, used, live := 0, 0, 0
	for i := range g.shards {
		ar := g.shards[i].arr.Load()
		tot += len(ar.slots)
		used += ar.used
		live += ar.live
	}
	t.Logf("%v/op, %.2f B/op, rebuilds %d (slots %d), size %d used %d live %d, Len %d, shrinks %d, sweeps %d swept %d",
		el/2_000_000, float64(b.TotalAlloc-a.TotalAlloc)/2e6, rebuilds, rebuiltSlots, tot, used, live, s.Len(), shrinks, sweeps, sweptSlots)
}
