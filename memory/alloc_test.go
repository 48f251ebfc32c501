//go:build !race

// The race detector allocates on synchronisation (and sync.Pool drops items under it), so
// allocation counts mean nothing there: the tests in this file are built only without it,
// and make test (which builds without it) runs them; make race leaves them out.

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

// TestColdRegimeAllocatesNothing: many keys, each decided rarely under a per-second
// limit, so that the state of almost every key has emptied and been swept before it comes
// back; every decision then inserts. Amortised over many decisions (table growth, slot
// reuse, sweeps, rebuilds when generations run out) it allocates at most 1 byte.
func TestColdRegimeAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	const n, ops = 10_000, 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	for _, c := range lockFreeCases() {
		if c.alg == sluice.FixedWindow {
			continue // a key that comes back within its window finds it live
		}
		t.Run(c.String(), func(t *testing.T) {
			// The background sweeper never runs: inserts sweep a shard when they find it
			// full, which is what keeps this regime cold.
			s, clk := newTestStore(t, WithSweepInterval(time.Hour), WithShards(16))
			l := sluice.PerSecond(c.rate(1000, time.Second)) // a unit is live for about 1ms
			l.Algorithm = c.alg
			rng := rand.New(rand.NewPCG(1, 2))
			fresh := 0
			run := func(ops int) {
				for range ops {
					clk.Advance(4 * time.Microsecond) // a key comes back every 40ms on average
					d, err := s.AllowN(ctx, keys[rng.IntN(n)], l, 1)
					if err != nil || !d.Allowed {
						t.Fatalf("%+v, %v", d, err)
					}
					if d.Remaining == l.MaxCost()-1 {
						fresh++
					}
				}
			}
			run(3 * ops) // the tables reach their size
			fresh = 0
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			run(ops)
			runtime.ReadMemStats(&after)
			if f := float64(fresh) / ops; f < 0.9 {
				t.Fatalf("only %.2f of decisions found no live state: not the cold regime", f)
			}
			if held := s.Len(); held > n/3 {
				t.Fatalf("%d of %d keys hold state: not swept", held, n)
			}
			bytes := float64(after.TotalAlloc-before.TotalAlloc) / ops
			allocs := float64(after.Mallocs-before.Mallocs) / ops
			if bytes > 1 || allocs > 0.01 {
				t.Fatalf("%.3f B and %.4f allocations per decision", bytes, allocs)
			}
			t.Logf("%.3f B and %.5f allocations per decision, %d keys held", bytes, allocs, s.Len())
		})
	}
}
