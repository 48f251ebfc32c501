package redisstore

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// TestDifferentialMemory feeds the memory store and the Redis store the same random
// operations with the same clock and demands identical Decisions: per algorithm 50,000
// operations over a few keys and limits, costs 0–3, single and multi-limit decisions and
// resets, with time steps that are small, zero, exactly on window boundaries (and 1µs either
// side), large jumps, and occasionally backwards. Concurrency lanes also release leases
// (held, expired or released already), and both stores must agree whether each was held.
//
// The operations run in lanes (10 per rate algorithm, 4 for Concurrency, 64 in all), each with its own keys and
// random sequence. At every step the clock moves, then every lane makes one operation
// concurrently, so the Redis store coalesces them into a few script calls, as it would
// under load, and the differential covers the batching too.
func TestDifferentialMemory(t *testing.T) {
	t.Parallel()
	const lanesPerAlgorithm, steps = 10, 5_000
	clock, mem, red := pairedStores(t)

	var lanes []*lane
	for _, a := range append(store.Algorithms(), sluice.Concurrency) {
		n := lanesPerAlgorithm
		if a == sluice.Concurrency {
			n = 4 // one state machine of a few lines: fewer lanes cover it
		}
		for i := 0; i < n; i++ {
			seed := uint64(a)<<32 | uint64(i)
			lanes = append(lanes, &lane{
				name:   fmt.Sprintf("%v/lane%d", a, i),
				rng:    rand.New(rand.NewPCG(seed, 0x5eed)),
				limits: limitsFor(a),
				keys:   []string{fmt.Sprintf("L%d:k0", seed), fmt.Sprintf("L%d:k1", seed), fmt.Sprintf("L%d:k2", seed)},
			})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := 0; i < steps; i++ {
		step(rng, clock, limitsFor(sluice.GCRA))
		stepLanes(ctx, lanes, i, clock.Micros(), mem, red)
	}
	reportLanes(t, lanes)
}

// pairedStores returns a memory store and a Redis store (on a server of its own) that
// both read the returned clock; Redis keeps keys a day, whatever that clock says.
func pairedStores(t *testing.T) (*clocktest.Clock, *memory.Store, *Store) {
	t.Helper()
	srv := redistest.Start(t)
	clock := newTestClock()
	mem := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	t.Cleanup(func() { mem.Close() })
	return clock, mem, open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(24*time.Hour))
}

// lane is one sequence of differential operations on its own keys.
// stepLanes runs step i of every lane that has not failed, all at once, at now.
func stepLanes(ctx context.Context, lanes []*lane, i int, now int64, mem *memory.Store, red *Store) {
	var wg sync.WaitGroup
	for _, l := range lanes {
		if l.err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.err = l.op(ctx, i, now, mem, red)
		}()
	}
	wg.Wait()
}

// reportLanes fails t for every lane that failed.
func reportLanes(t *testing.T, lanes []*lane) {
	t.Helper()
	for _, l := range lanes {
		if l.err != nil {
			t.Errorf("%s: %v", l.name, l.err)
		}
	}
}

type lane struct {
	name    string
	rng     *rand.Rand
	limits  []sluice.Limit
	keys    []string
	history []laneOp
	err     error
	// leases are the leases the stores gave a Concurrency lane, each store's id for the
	// same decision, kept after release or expiry too (releasing them again is an op).
	leases []leasePair
}

type leasePair struct {
	key        string
	limit      sluice.Limit
	mem, redis sluice.LeaseID
}

// laneOp is one operation of a lane, kept for the failure report.
type laneOp struct {
	at   int64
	kind string
	reqs []sluice.Request
}

func (o laneOp) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%d %s", o.at, o.kind)
	for _, r := range o.reqs {
		fmt.Fprintf(&b, " [%s %v n=%d]", r.Key, r.Limit, r.N)
	}
	return b.String()
}

func (l *lane) randReq() sluice.Request {
	lim := l.limits[l.rng.IntN(len(l.limits))]
	n := min(l.rng.Int64N(4), lim.MaxCost())
	return sluice.Request{Key: l.keys[l.rng.IntN(len(l.keys))], Limit: lim, N: n}
}

// op makes operation i at now on both stores and compares the outcomes.
func (l *lane) op(ctx context.Context, i int, now int64, mem *memory.Store, red *Store) error {
	op := laneOp{at: now}
	switch p := l.rng.IntN(100); {
	case p < 15 && len(l.leases) > 0:
		op.kind = "release"
	case p < 3:
		op.kind = "reset"
		op.reqs = []sluice.Request{l.randReq()}
	case p < 12:
		op.kind = "multi"
		seen := map[[2]any]bool{}
		for len(op.reqs) < 2+l.rng.IntN(2) {
			r := l.randReq()
			if k := [2]any{r.Key, r.Limit}; !seen[k] {
				seen[k] = true
				op.reqs = append(op.reqs, r)
			}
		}
	default:
		op.kind = "allow"
		op.reqs = []sluice.Request{l.randReq()}
	}
	l.history = append(l.history, op)
	if len(l.history) > 16 {
		l.history = l.history[1:]
	}

	var got, want []sluice.Decision
	var gerr, werr error
	switch op.kind {
	case "release":
		lp := l.leases[l.rng.IntN(len(l.leases))]
		op.reqs = []sluice.Request{{Key: lp.key, Limit: lp.limit}}
		w, err1 := mem.Release(ctx, lp.key, lp.limit, lp.mem)
		g, err2 := red.Release(ctx, lp.key, lp.limit, lp.redis)
		if err1 != nil || err2 != nil || w != g {
			return fmt.Errorf("op %d %v: memory released %v (err %v), redis %v (err %v)", i, op, w, err1, g, err2)
		}
		return nil
	case "reset":
		r := op.reqs[0]
		werr = mem.Reset(ctx, r.Key, r.Limit)
		gerr = red.Reset(ctx, r.Key, r.Limit)
	case "multi":
		want, werr = sluice.AllowMulti(ctx, mem, op.reqs)
		got, gerr = sluice.AllowMulti(ctx, red, op.reqs)
	default:
		r := op.reqs[0]
		w, err1 := mem.AllowN(ctx, r.Key, r.Limit, r.N)
		g, err2 := red.AllowN(ctx, r.Key, r.Limit, r.N)
		want, werr, got, gerr = []sluice.Decision{w}, err1, []sluice.Decision{g}, err2
	}
	if werr != nil || gerr != nil {
		return fmt.Errorf("op %d %v: memory err %v, redis err %v", i, op, werr, gerr)
	}
	for j := range want {
		if (got[j].Lease != 0) != (want[j].Lease != 0) || (want[j].Lease != 0) != (want[j].Allowed && op.reqs[j].N > 0 && op.reqs[j].Limit.Algorithm == sluice.Concurrency) {
			return fmt.Errorf("op %d request %d: redis lease %v, memory lease %v for %+v", i, j, got[j].Lease, want[j].Lease, want[j])
		}
		if want[j].Lease != 0 {
			l.leases = append(l.leases, leasePair{op.reqs[j].Key, op.reqs[j].Limit, want[j].Lease, got[j].Lease})
			if len(l.leases) > 32 {
				l.leases = l.leases[1:]
			}
		}
		got[j].Lease, want[j].Lease = 0, 0
		if got[j] != want[j] {
			var h strings.Builder
			for _, o := range l.history {
				fmt.Fprintf(&h, "\n  %v", o)
			}
			return fmt.Errorf("op %d request %d: redis %+v, memory %+v; recent ops:%s", i, j, got[j], want[j], h.String())
		}
	}
	return nil
}

// step advances clock by a random step chosen to hit the interesting cases.
func step(rng *rand.Rand, clock *clocktest.Clock, limits []sluice.Limit) {
	l := limits[rng.IntN(len(limits))]
	period := l.Period.Microseconds()
	t := max(1, (period+l.Rate-1)/l.Rate)
	now := clock.Micros()
	switch p := rng.IntN(100); {
	case p < 20: // same instant
	case p < 50: // a fraction of an emission interval
		clock.SetMicros(now + rng.Int64N(t/2+1))
	case p < 70: // up to one period
		clock.SetMicros(now + rng.Int64N(period+1))
	case p < 85: // exactly on the next window boundary, or 1µs either side
		next := (now/period + 1) * period
		clock.SetMicros(next + rng.Int64N(3) - 1)
	case p < 92: // a large jump
		clock.SetMicros(now + period*(1+rng.Int64N(1000)) + rng.Int64N(period))
	case p < 95: // backwards (a clock step, a failover to a host behind)
		clock.SetMicros(now - rng.Int64N(2*period+1))
	default: // up to three periods
		clock.SetMicros(now + rng.Int64N(3*period+1))
	}
}

// extremeLimits are limits at the edges sluice.Limit.Validate allows, where an
// intermediate that left 2^53 would make Lua's doubles disagree with Go's integers.
func extremeLimits(a sluice.Algorithm) []sluice.Limit {
	maxP := store.MaxPeriod
	var ls []sluice.Limit
	switch a {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		ls = []sluice.Limit{
			{Rate: store.MaxRate, Period: maxP}, // T = 1024µs, Burst·T = 2^50
			{Rate: 1, Period: maxP},             // T = 2^50
			{Rate: 1 << 20, Period: (1 << 20) * time.Microsecond, Burst: store.MaxRate}, // T = 1µs, the deepest bucket
			{Rate: 3, Period: maxP - 2*time.Microsecond, Burst: 2},                      // Burst·U > 2^50: whole µs, T rounded up
			{Rate: 1<<20 - 3, Period: 1 << 30 * time.Microsecond},                       // exact units: S = 2^20-3, Burst·U just below 2^50
			{Rate: 7, Period: maxP, Burst: 1},                                           // exact units: S = 7, Burst·U = 2^50
			{Rate: 999_983, Period: 24 * time.Hour, Burst: 1000},                        // exact units: S = 999983
		}
	case sluice.SlidingLog:
		ls = []sluice.Limit{{Rate: store.MaxLogRate, Period: maxP}, {Rate: 3, Period: maxP}}
	default:
		ls = []sluice.Limit{
			{Rate: store.MaxRate, Period: maxP},
			{Rate: store.MaxRate, Period: time.Microsecond},
			{Rate: store.MaxRate - 1, Period: maxP - time.Microsecond},
		}
	}
	return withAlgorithm(a, ls)
}

// TestDifferentialExtremes: the memory store and the Redis store agree at the largest
// rates, bursts, periods and costs Validate allows, with the clock moving by fractions of
// an emission interval, onto window boundaries and across maximal periods (up to 70 years
// past the present).
func TestDifferentialExtremes(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	start := clock.Micros()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	var all []sluice.Limit
	for _, a := range store.Algorithms() {
		all = append(all, extremeLimits(a)...)
	}
	keys := []string{"x0", "x1"}
	allowed, denied := 0, 0
	for i := 0; i < 3000; i++ {
		l := all[rng.IntN(len(all))]
		period := l.Period.Microseconds()
		now := clock.Micros()
		switch p := rng.IntN(10); {
		case p < 3: // same instant
		case p < 5:
			clock.SetMicros(now + rng.Int64N(2048))
		case p < 7: // onto this limit's next window boundary, or 1µs either side
			clock.SetMicros((now/period+1)*period + rng.Int64N(3) - 1)
		case p < 8: // backwards
			clock.SetMicros(now - rng.Int64N(1<<20))
		default: // a fraction of a maximal period
			clock.SetMicros(now + rng.Int64N(int64(store.MaxPeriod/time.Microsecond)/8))
		}
		// Times stay within two maximal periods (70 years) of the present, so that the end of
		// a window two periods on, the largest time the algorithms compute, is below 2^53:
		// the range store.MaxPeriod is sized for.
		if clock.Micros() > start+2*int64(store.MaxPeriod/time.Microsecond) {
			clock.SetMicros(start) // a jump back: the stores must agree on that too
		}
		mc := l.MaxCost()
		n := []int64{0, 1, 2, 3, mc, mc / 2, mc - 1}[rng.IntN(7)]
		if l.Algorithm == sluice.SlidingLog {
			n = min(n, 3) // one timestamp per unit: a million-unit log is not what this tests
		}
		n = min(max(n, 0), mc)
		k := keys[rng.IntN(len(keys))]
		want, werr := mem.AllowN(ctx, k, l, n)
		got, gerr := red.AllowN(ctx, k, l, n)
		if werr != nil || gerr != nil {
			t.Fatalf("step %d %v n=%d at %d: memory err %v, redis err %v", i, l, n, clock.Micros(), werr, gerr)
		}
		if got != want {
			t.Fatalf("step %d %v n=%d at %d: redis %+v, memory %+v", i, l, n, clock.Micros(), got, want)
		}
		if n > 0 && got.Allowed {
			allowed++
		} else if !got.Allowed {
			denied++
		}
	}
	if allowed < 300 || denied < 300 {
		t.Errorf("%d spends allowed and %d denied: the run did not exercise both", allowed, denied)
	}

	// Targeted: the sliding window weighs the previous window's b units by
	// b·(P-e-1)/P. At P = 2^50 with b odd, e is chosen so that the exact product is one
	// short of a multiple of P; in doubles it rounds up to that multiple, and a naive
	// floor(b·(P-e-1)/P) comes out one unit too high. The script's long division must not.
	P := int64(store.MaxPeriod / time.Microsecond)
	sw := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: store.MaxRate, Period: store.MaxPeriod}
	bigP := big.NewInt(P)
	for _, b := range []int64{3, 5, 12345, 1<<39 + 1} {
		key := fmt.Sprint("sw", b)
		w0 := (start/P + 1) * P
		clock.SetMicros(w0)
		want, _ := mem.AllowN(ctx, key, sw, b)
		got, err := red.AllowN(ctx, key, sw, b)
		if err != nil || got != want || !got.Allowed {
			t.Fatalf("b=%d: spending: redis %+v %v, memory %+v", b, got, err, want)
		}
		inv := new(big.Int).ModInverse(big.NewInt(b), bigP)
		m := new(big.Int).Mul(big.NewInt(P-1), inv)
		m.Mod(m, bigP) // b·m ≡ -1 (mod P)
		clock.SetMicros(w0 + P + (P - 1 - m.Int64()))
		for _, n := range []int64{0, 1} {
			want, _ := mem.AllowN(ctx, key, sw, n)
			got, err := red.AllowN(ctx, key, sw, n)
			if err != nil || got != want {
				t.Fatalf("b=%d n=%d at a weight one short of an integer: redis %+v %v, memory %+v", b, n, got, err, want)
			}
		}
	}
}

// TestDifferentialLargeCalls: script calls of many decisions, built and sent as a batch
// goroutine sends them (Store.exec), decide exactly as the memory store decides the same
// requests one after another. A call carries 1 to 1,100 requests (past the script's
// chunks of 1000 keys for MGET and of 1000 values for its reply), independent decisions
// and all-or-nothing groups mixed, of one algorithm (that algorithm's own script) or of
// every algorithm and calendar limits (the general script), on keys that repeat within
// the call or do not.
func TestDifferentialLargeCalls(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	cn, err := red.usable()
	if err != nil {
		t.Fatal(err)
	}
	algs := append(store.Algorithms(), sluice.Concurrency)
	var all []sluice.Limit
	for _, a := range algs {
		all = append(all, limitsFor(a)...)
	}
	all = append(all, calendarLimits...)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(25, 25))
	bufs := new(callBufs)
	sizes := []int{1, 1, 1, 2, 3, 3, 16, 16, 40, 300, 1100}
	seen := map[string]int{} // calls made, by kind, for the coverage check at the end
	for round := 0; round < 400; round++ {
		step(rng, clock, limitsFor(sluice.GCRA))
		limits := all
		if rng.IntN(2) == 0 {
			limits = limitsFor(algs[rng.IntN(len(algs))])
		}
		nkeys := []int{2, 8, 60}[rng.IntN(3)]
		l := &lane{rng: rng, limits: limits}
		for k := 0; k < nkeys; k++ {
			l.keys = append(l.keys, fmt.Sprint("big:", k))
		}
		size := sizes[rng.IntN(len(sizes))]
		var calls []*call
		var reqs [][]sluice.Request
		for total := 0; total < size; {
			group := []sluice.Request{l.randReq()}
			if size-total >= 2 && rng.IntN(8) == 0 {
				for len(group) < min(2+rng.IntN(3), size-total) {
					r := l.randReq()
					if !slices.ContainsFunc(group, func(g sluice.Request) bool { return g.Key == r.Key && g.Limit == r.Limit }) {
						group = append(group, r)
					}
				}
			}
			c := getCall(ctx)
			for _, r := range group {
				c.items = append(c.items, newItem(r.Key, red.info(r.Limit), r.N))
			}
			c.res = make([]algo.Outcome, len(group))
			calls, reqs = append(calls, c), append(reqs, group)
			total += len(group)
		}
		red.exec(cn.client, calls, bufs)
		keys := map[string]bool{}
		repeated := false
		for i, c := range calls {
			<-c.done
			if c.err != nil {
				t.Fatalf("round %d: a call of %d requests: %v", round, size, c.err)
			}
			var want []sluice.Decision
			if len(reqs[i]) == 1 {
				r := reqs[i][0]
				d, err := mem.AllowN(ctx, r.Key, r.Limit, r.N)
				if err != nil {
					t.Fatal(err)
				}
				want = []sluice.Decision{d}
			} else if want, err = sluice.AllowMulti(ctx, mem, reqs[i]); err != nil {
				t.Fatal(err)
			}
			for j, r := range reqs[i] {
				k := red.Key(r.Key, r.Limit)
				repeated = repeated || keys[k]
				keys[k] = true
				got := c.res[j].Decision(r.Limit)
				if (got.Lease != 0) != (want[j].Lease != 0) {
					t.Fatalf("round %d (%d requests), request %d of call %d, %s %v n=%d: redis lease %v, memory lease %v",
						round, size, j, i, r.Key, r.Limit, r.N, got.Lease, want[j].Lease)
				}
				got.Lease, want[j].Lease = 0, 0
				if got != want[j] {
					t.Fatalf("round %d (%d requests), request %d of call %d, %s %v n=%d at %d: redis %+v, memory %+v",
						round, size, j, i, r.Key, r.Limit, r.N, clock.Micros(), got, want[j])
				}
			}
		}
		for _, c := range calls {
			putCall(c)
		}
		seen[fmt.Sprintf("size>1000:%v", size > 1000)]++
		seen[fmt.Sprintf("repeated:%v", repeated)]++
		seen[fmt.Sprintf("groups:%v", len(calls) < size)]++
		seen[fmt.Sprintf("mixed:%v", len(limits) == len(all))]++
	}
	for _, kind := range []string{"size>1000", "repeated", "groups", "mixed"} {
		if seen[kind+":true"] < 10 || seen[kind+":false"] < 10 {
			t.Errorf("%s: %d calls with, %d without: the run did not exercise both", kind, seen[kind+":true"], seen[kind+":false"])
		}
	}
}
