package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
)

// TestDifferentialMemory feeds the memory store and the Redis store the same random
// operations with the same clock and demands identical Decisions: per algorithm 100,000
// operations over a few keys and limits, costs 0–3, single and multi-limit decisions and
// resets, with time steps that are small, zero, exactly on window boundaries (and 1µs either
// side), large jumps, and occasionally backwards.
//
// The operations run in lanes (10 per algorithm, 60 in all), each with its own keys and
// random sequence. At every step the clock moves, then every lane makes one operation
// concurrently, so the Redis store coalesces them into a few script calls, as it would
// under load, and the differential covers the batching too.
func TestDifferentialMemory(t *testing.T) {
	t.Parallel()
	const lanesPerAlgorithm, steps = 10, 10_000
	srv := redistest.Start(t)
	clock := newTestClock()
	mem := memory.New(clock.memoryOption(), memory.WithSweepInterval(0))
	t.Cleanup(func() { mem.Close() })
	red := open(t, srv.URL(), clock.option(), WithMinTTL(24*time.Hour))

	var lanes []*lane
	for _, a := range sluice.Algorithms() {
		for i := 0; i < lanesPerAlgorithm; i++ {
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
	var wg sync.WaitGroup
	for i := 0; i < steps; i++ {
		step(rng, clock, limitsFor(sluice.GCRA))
		for _, l := range lanes {
			if l.err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.err = l.op(ctx, i, clock.Micros(), mem, red)
			}()
		}
		wg.Wait()
	}
	for _, l := range lanes {
		if l.err != nil {
			t.Errorf("%s: %v", l.name, l.err)
		}
	}
}

// lane is one sequence of differential operations on its own keys.
type lane struct {
	name    string
	rng     *rand.Rand
	limits  []sluice.Limit
	keys    []string
	history []laneOp
	err     error
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
	case "reset":
		r := op.reqs[0]
		werr = mem.Reset(ctx, r.Key, r.Limit)
		gerr = red.Reset(ctx, r.Key, r.Limit)
	case "multi":
		want, werr = mem.AllowMulti(ctx, op.reqs)
		got, gerr = red.AllowMulti(ctx, op.reqs)
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
func step(rng *rand.Rand, clock *testClock, limits []sluice.Limit) {
	l := limits[rng.IntN(len(limits))]
	period := l.Period.Microseconds()
	t := max(1, (period+l.Rate-1)/l.Rate)
	now := clock.Micros()
	switch p := rng.IntN(100); {
	case p < 20: // same instant
	case p < 50: // a fraction of an emission interval
		clock.Set(now + rng.Int64N(t/2+1))
	case p < 70: // up to one period
		clock.Set(now + rng.Int64N(period+1))
	case p < 85: // exactly on the next window boundary, or 1µs either side
		next := (now/period + 1) * period
		clock.Set(next + rng.Int64N(3) - 1)
	case p < 92: // a large jump
		clock.Set(now + period*(1+rng.Int64N(1000)) + rng.Int64N(period))
	case p < 95: // backwards (a clock step, a failover to a host behind)
		clock.Set(now - rng.Int64N(2*period+1))
	default: // up to three periods
		clock.Set(now + rng.Int64N(3*period+1))
	}
}
