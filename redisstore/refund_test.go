package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// refundModel is one key's state under one limit, decided and refunded by the Go
// functions of internal/algo, as the memory store keeps it.
type refundModel struct {
	p   algo.Params
	s   algo.State
	log algo.Log
}

func (m *refundModel) decide(now, n int64) algo.Result {
	if m.p.Algo == sluice.SlidingLog {
		return algo.SlidingLog(&m.log, now, m.p, n, true)
	}
	s, r := algo.Decide(m.s, now, m.p, n)
	// As both stores: a decision that spends nothing creates no key.
	if m.s != (algo.State{}) || r.Allowed && n > 0 {
		m.s = s
	}
	return r
}

func (m *refundModel) refund(now, n, at int64) {
	if m.p.Algo == sluice.SlidingLog {
		algo.RefundSlidingLog(&m.log, now, m.p, n, at)
		return
	}
	m.s = algo.Refund(m.s, now, m.p, n, at)
}

// TestDifferentialRefund feeds the Go refunds (internal/algo) and the refund script the
// same spends, refunds and decisions with the same clock, and demands identical results:
// per algorithm 1,000 operations over three keys and three limits, refunds of spends made
// just before or long before (their windows rolled, their units expired), with the
// clock's steps from TestDifferentialMemory, backwards ones included, and 500 more at the
// limits and costs of TestDifferentialExtremes. The refund script's looks must match the
// Go decision of cost 0 after the Go refund, every later decision must match too, and so
// must the states, field by field (timestamp by timestamp for SlidingLog).
func TestDifferentialRefund(t *testing.T) {
	t.Parallel()
	srv, clock, red, cn := refundStore(t)
	ctx := context.Background()
	type spend struct {
		req sluice.Request
		at  int64
	}
	// lane runs ops operations on limits of algorithm a, moving the clock with move and
	// drawing costs with cost.
	lane := func(t *testing.T, a sluice.Algorithm, limits []sluice.Limit, ops int,
		move func(*rand.Rand, sluice.Limit), cost func(*rand.Rand, sluice.Limit) int64) {
		rng := rand.New(rand.NewPCG(uint64(a), uint64(len(limits))))
		models := map[[2]any]*refundModel{}
		model := func(r sluice.Request) *refundModel {
			k := [2]any{r.Key, r.Limit}
			if models[k] == nil {
				models[k] = &refundModel{p: algo.ParamsOf(r.Limit)}
			}
			return models[k]
		}
		var spends []spend
		refunds := 0
		var hist []string
		note := func(f string, args ...any) {
			hist = append(hist, fmt.Sprintf(f, args...))
			if len(hist) > 12 {
				hist = hist[1:]
			}
		}
		// checkState compares r's key in Redis with the Go state, field by field, or
		// timestamp by timestamp for SlidingLog, whose members at one timestamp t must
		// be named t:0 to t:k-1.
		checkState := func(r sluice.Request) {
			if a == sluice.SlidingLog {
				v, err := srv.Do("ZRANGE", red.Key(r.Key, r.Limit), "0", "-1", "WITHSCORES")
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				seen := map[string]int{}
				if v != "" {
					f := strings.Split(v, "\n")
					for j := 0; j+1 < len(f); j += 2 {
						got = append(got, f[j+1])
						if want := fmt.Sprintf("%s:%d", f[j+1], seen[f[j+1]]); !slices.Contains(f, want) {
							t.Fatalf("%v: no member %s among %q", r.Limit, want, f)
						}
						seen[f[j+1]]++
					}
				}
				var want []string
				for _, ts := range model(r).log.Timestamps() {
					want = append(want, fmt.Sprint(ts))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%v: log %v in Redis, %v in Go; recent:\n%s", r.Limit, got, want, strings.Join(hist, "\n"))
				}
				return
			}
			v, err := srv.Do("GET", red.Key(r.Key, r.Limit))
			if err != nil {
				t.Fatal(err)
			}
			if st, m := decodeState(v), model(r); st != m.s {
				t.Fatalf("%v: state %+v in Redis, %+v in Go; recent:\n%s", r.Limit, st, m.s, strings.Join(hist, "\n"))
			}
		}
		for i := 0; i < ops; i++ {
			move(rng, limits[rng.IntN(len(limits))])
			now := clock.Micros()
			if len(spends) > 0 && rng.IntN(3) == 0 {
				// Refund a recent spend, most often the latest.
				k := len(spends) - 1 - min(rng.IntN(4), len(spends)-1)
				sp := spends[k]
				spends = append(spends[:k], spends[k+1:]...)
				m := model(sp.req)
				note("t=%d refund %s n=%d at=%d", now, sp.req.Key, sp.req.N, sp.at)
				m.refund(now, sp.req.N, sp.at)
				look := *m // the script's look writes nothing: neither does this one
				want := look.decide(now, 0)
				c := &slotCall{idx: []int{0}, res: make([]algo.Outcome, 1), at: sp.at}
				if err := red.refundSlot(ctx, cn, []sluice.Request{sp.req}, c); err != nil {
					t.Fatalf("op %d: refund: %v", i, err)
				}
				if c.res[0].Result != want {
					t.Fatalf("op %d: refund of %v n=%d spent at %d, at %d: script's look %+v, Go %+v; recent:\n%s",
						i, sp.req.Limit, sp.req.N, sp.at, now, c.res[0], want, strings.Join(hist, "\n"))
				}
				refunds++
				checkState(sp.req)
				continue
			}
			lim := limits[rng.IntN(len(limits))]
			r := sluice.Request{Key: fmt.Sprintf("refund:%v:%d:%d", a, len(limits), rng.IntN(3)), Limit: lim, N: cost(rng, lim)}
			note("t=%d allow %s %v n=%d", now, r.Key, r.Limit, r.N)
			want := model(r).decide(now, r.N)
			got, err := red.AllowN(ctx, r.Key, r.Limit, r.N)
			if err != nil {
				t.Fatal(err)
			}
			if got != want.Decision(r.Limit) {
				t.Fatalf("op %d: %v n=%d at %d: redis %+v, Go %+v; recent:\n%s", i, r.Limit, r.N, now, got, want, strings.Join(hist, "\n"))
			}
			if got.Allowed && r.N > 0 {
				spends = append(spends, spend{r, now})
			}
			checkState(r)
		}
		if refunds < ops/15 {
			t.Fatalf("only %d refunds", refunds)
		}
	}
	start := clock.Micros()
	for _, a := range store.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			limits := limitsFor(a)
			lane(t, a, limits, 1000, func(rng *rand.Rand, _ sluice.Limit) { step(rng, clock, limits) },
				func(rng *rand.Rand, l sluice.Limit) int64 { return min(rng.Int64N(4), l.MaxCost()) })
		})
		// At the edges Validate allows (the clock moves as in TestDifferentialExtremes).
		t.Run(a.String()+"/extremes", func(t *testing.T) {
			lane(t, a, extremeLimits(a), 500, func(rng *rand.Rand, l sluice.Limit) {
				period, now := l.Period.Microseconds(), clock.Micros()
				switch p := rng.IntN(10); {
				case p < 3:
				case p < 6:
					clock.SetMicros(now + rng.Int64N(2048))
				case p < 8:
					clock.SetMicros((now/period+1)*period + rng.Int64N(3) - 1)
				case p < 9:
					clock.SetMicros(now - rng.Int64N(1<<20))
				default:
					clock.SetMicros(now + rng.Int64N(int64(store.MaxPeriod/time.Microsecond)/8))
				}
				if clock.Micros() > start+2*int64(store.MaxPeriod/time.Microsecond) {
					clock.SetMicros(start)
				}
			}, func(rng *rand.Rand, l sluice.Limit) int64 {
				mc := l.MaxCost()
				n := []int64{0, 1, 2, 3, mc, mc / 2, mc - 1}[rng.IntN(7)]
				if l.Algorithm == sluice.SlidingLog {
					n = min(n, 3)
				}
				return min(max(n, 0), mc)
			})
		})
	}
}

// refundStore starts a redis-server and opens a store on it, on a test clock and with a day's
// minimum TTL (so that a TTL a refund rewrote can be told), and its connection.
func refundStore(t *testing.T) (*redistest.Server, *clocktest.Clock, *Store, *conn) {
	t.Helper()
	srv := redistest.Start(t)
	clock := newTestClock()
	red := open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(24*time.Hour))
	cn, err := red.connected()
	if err != nil {
		t.Fatal(err)
	}
	return srv, clock, red, cn
}

func decodeState(v string) algo.State {
	var f [3]int64
	for i := 0; i < len(v)/8 && i < 3; i++ {
		f[i] = readFloat([]byte(v[8*i:]))
	}
	return algo.State{A: f[0], B: f[1], C: f[2]}
}

// TestRefundBoundaries pins the refund scripts to the Go refunds (internal/algo) at the
// boundaries the random operations of TestDifferentialRefund almost never land on: the
// script's look and the key's state must match the Go ones after every step, and a refund
// that changes nothing must write nothing (the key's TTL is left as it was).
func TestRefundBoundaries(t *testing.T) {
	t.Parallel()
	srv, clock, red, cn := refundStore(t)
	ctx := context.Background()
	// step is one operation at offset now from the start: a spend of n when refund is
	// false, else a refund of n spent at offset at.
	type step struct {
		now, n, at int64
		refund     bool
	}
	// Rate 3 per second: one unit is 1e6/3 µs, S = 3 (time in thirds of a µs).
	thirds := sluice.Limit{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second}
	fixed := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Second}
	cases := []struct {
		name  string
		limit sluice.Limit
		steps []step
		// keepTTL, when set, sets the key's TTL to 1 h before the last step and
		// demands that the last step leave it.
		keepTTL bool
	}{
		// The spend's time, n·Period/Rate = 333333⅓ µs, is not whole: a refund ⌊333333⅓⌋
		// µs after it still gives back ⅓ µs, which brings the TAT to now.
		{name: "GCRA/elapsed floor of the spend's time", limit: thirds, steps: []step{
			{now: 0, n: 1},
			{now: 333333, n: 1, at: 0, refund: true},
		}},
		// After the refund the TAT is now - ⅔ µs: a whole µs equal to now and a
		// fraction, which the refund clamps to now exactly (no fraction left). Refunds
		// of spends as the store makes them do not come here (the spend's own time
		// keeps the TAT at or after now); the refund's contract takes any at.
		{name: "GCRA/TAT now less a fraction", limit: thirds, steps: []step{
			{now: 0, n: 2},
			{now: 333334, n: 1, at: 333334, refund: true},
		}},
		// The window's count is back to 0; a second refund in it changes nothing.
		{name: "FixedWindow/refund of an empty window", limit: fixed, steps: []step{
			{now: 0, n: 1},
			{now: 10, n: 1, at: 0, refund: true},
			{now: 20, n: 1, at: 0, refund: true},
		}, keepTTL: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := clock.Micros()/int64(time.Hour/time.Microsecond)*int64(time.Hour/time.Microsecond) +
				int64(i+1)*int64(time.Hour/time.Microsecond)
			key := fmt.Sprintf("boundary:%d", i)
			req := sluice.Request{Key: key, Limit: tc.limit}
			m := &refundModel{p: algo.ParamsOf(tc.limit)}
			for j, st := range tc.steps {
				now := start + st.now
				clock.SetMicros(now)
				req.N = st.n
				last := j == len(tc.steps)-1
				if last && tc.keepTTL {
					srv.MustDo("PEXPIRE", red.Key(key, tc.limit), "3600000")
				}
				if st.refund {
					m.refund(now, st.n, start+st.at)
					look := *m
					want := look.decide(now, 0)
					c := &slotCall{idx: []int{0}, res: make([]algo.Outcome, 1), at: start + st.at}
					if err := red.refundSlot(ctx, cn, []sluice.Request{req}, c); err != nil {
						t.Fatalf("step %d: refund: %v", j, err)
					}
					if c.res[0].Result != want {
						t.Fatalf("step %d: script's look %+v, Go %+v", j, c.res[0], want)
					}
				} else {
					want := m.decide(now, st.n)
					got, err := red.AllowN(ctx, key, tc.limit, st.n)
					if err != nil {
						t.Fatal(err)
					}
					if got != want.Decision(tc.limit) {
						t.Fatalf("step %d: redis %+v, Go %+v", j, got, want)
					}
				}
				v, err := srv.Do("GET", red.Key(key, tc.limit))
				if err != nil {
					t.Fatal(err)
				}
				if got := decodeState(v); got != m.s {
					t.Fatalf("step %d: state %+v in Redis, %+v in Go", j, got, m.s)
				}
			}
			if tc.keepTTL {
				ttl := srv.MustDo("PTTL", red.Key(key, tc.limit))
				if n, err := strconv.ParseInt(ttl, 10, 64); err != nil || n <= 0 || n > 3600000 {
					t.Fatalf("TTL %s ms after a refund that changes nothing, want the 1 h set before it", ttl)
				}
			}
		})
	}
}
