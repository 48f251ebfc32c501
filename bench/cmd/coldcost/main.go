// Command coldcost makes the decisions of BenchmarkMemoryCold one at a time on a clock it
// advances itself, so that callgrind can count what one decision costs: instructions,
// data reads and writes, and simulated cache misses, figures that do not move with
// whatever else the machine is doing, unlike ns/op.
//
//	cd bench && go build -o /tmp/coldcost ./cmd/coldcost
//	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --cache-sim=yes \
//	    --toggle-collect=main.measured --callgrind-out-file=/tmp/cg.out \
//	    /tmp/coldcost -lib sluice -keys 10000 -ops 200000
//
// then divide the totals line of /tmp/cg.out (callgrind_annotate prints it) by -ops.
// Go's asynchronous preemption signals upset callgrind, hence GODEBUG.
//
// Each decision is one unit for a key drawn uniformly at random from -keys keys, under
// BenchmarkMemoryCold's limit (coldRate: 10⁸/keys a second), the clock advancing -ns
// nanoseconds before each: at the default 200, a key comes back about twenty state
// lifetimes after its last visit, as in the benchmark. The untimed settling is the
// benchmark's (every key once, then 2·keys random decisions); only the -ops decisions
// after it run inside main.measured. -live decides BenchmarkAllow's limit instead, which
// never empties (the live regime). sluice's store runs with WithClock and no background
// sweeper (inserts still sweep a full shard), so a run is deterministic; its clock costs
// about a hundred instructions a decision more than the store's own. sethvargo reads its
// own clock.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

func main() {
	n := flag.Int("keys", 10_000, "distinct keys")
	ops := flag.Int("ops", 100_000, "measured decisions")
	lib := flag.String("lib", "sluice", "sluice or sethvargo")
	alg := flag.String("algo", "gcra", "sluice's algorithm: gcra or tokenbucket")
	nsPerOp := flag.Int64("ns", 200, "simulated nanoseconds per decision")
	live := flag.Bool("live", false, "decide a limit that never empties (BenchmarkAllow's)")
	flag.Parse()
	keys := make([]string, *n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	r := int64(100 * 1_000_000 / *n)
	ctx := context.Background()
	var clock atomic.Int64 // ns since base
	base := time.Unix(1_800_000_000, 0)
	var allow func(string) bool
	held := func() float64 { return 0 }
	switch *lib {
	case "sluice":
		s := memory.New(memory.WithClock(func() time.Time { return base.Add(time.Duration(clock.Load())) }),
			memory.WithSweepInterval(time.Hour))
		a := sluice.GCRA
		switch *alg {
		case "gcra":
		case "tokenbucket":
			a = sluice.TokenBucket
		default:
			fmt.Fprintf(os.Stderr, "unknown -algo %q\n", *alg)
			os.Exit(2)
		}
		l := sluice.Limit{Algorithm: a, Rate: r, Period: time.Second}
		if *live {
			l = sluice.Limit{Algorithm: a, Rate: 1, Period: 24 * time.Hour, Burst: 10_000}
		}
		allow = func(k string) bool { d, _ := s.AllowN(ctx, k, l, 1); return d.Allowed }
		held = func() float64 { return float64(s.Len()) / float64(*n) }
	case "sethvargo":
		s, err := memorystore.New(&memorystore.Config{Tokens: uint64(r), Interval: time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		allow = func(k string) bool { _, _, _, ok, _ := s.Take(ctx, k); return ok }
	default:
		fmt.Fprintf(os.Stderr, "unknown -lib %q\n", *lib)
		os.Exit(2)
	}
	rng := rand.NewPCG(0, 1)
	run := func(m int, f func(func(string) bool, string) bool) int {
		denied := 0
		for range m {
			clock.Add(*nsPerOp)
			if !f(allow, keys[rng.Uint64()%uint64(*n)]) {
				denied++
			}
		}
		return denied
	}
	run(*n, settle)
	run(2**n, settle)
	runtime.GC() // the settling's garbage is not collected inside main.measured
	fmt.Printf("denied %d of %d, held/key %.3f\n", run(*ops, measured), *ops, held())
}

// measured makes one timed decision: callgrind collects inside it (--toggle-collect).
//
//go:noinline
func measured(allow func(string) bool, key string) bool { return allow(key) }

// settle makes one untimed decision.
//
//go:noinline
func settle(allow func(string) bool, key string) bool { return allow(key) }
