package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

// The global-mode tests run three nodes in one process, in two "regions": n1 and n2 reach
// the shared redis-server directly, n3 through a TCP proxy adding latency (region B).
// Every admission is recorded, inside the limiter, at the instant it was decided.

const regionBLatency = 10 * time.Millisecond // each way: a 20ms round trip

var globalLimit = sluice.Limit{Algorithm: sluice.GCRA, Rate: 200, Period: time.Second, Burst: 20}

// cluster is three nodes sharing one limit.
type cluster struct {
	t      testing.TB
	nodes  []*Global
	proxy  *faultproxy.Proxy
	start  time.Time
	mu     sync.Mutex
	events [][]time.Time // per node
	paths  []map[sluice.Path]int

	ticks, expected int // load generator ticks made and planned
}

// starved reports whether the load generator made fewer than half its planned ticks: the
// machine did not give the test the CPU it needs, so liveness (how much was admitted) says
// nothing about the limiter. Safety bounds are checked regardless.
func (c *cluster) starved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ticks < c.expected/2 {
		c.t.Logf("load generator starved: %d of %d ticks; liveness checks not meaningful", c.ticks, c.expected)
		return true
	}
	return false
}

// testLog is a logger that writes through tb.Log, so that what the stores log (Redis's hz
// advice, sync failures) shows with a failing test or -v, and after a benchmark's figures
// rather than between its name and them.
func testLog(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, nil))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newCluster(t testing.TB, srv *redistest.Server, opts ...GlobalOption) *cluster {
	t.Helper()
	c := &cluster{t: t, proxy: faultproxy.Start(t, srv.Addr())}
	c.proxy.SetLatency(regionBLatency)
	urls := []string{srv.URL(), srv.URL(), "redis://" + c.proxy.Addr()}
	c.events = make([][]time.Time, len(urls))
	c.paths = make([]map[sluice.Path]int, len(urls))
	for i, url := range urls {
		backend, err := redisstore.Open(url, redisstore.WithLogger(testLog(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { backend.Close() })
		g, err := NewGlobal(backend, append([]GlobalOption{WithNode(fmt.Sprintf("n%d", i+1)), WithLogger(testLog(t))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		g.onAdmit = func(at time.Time, n int64) {
			c.mu.Lock()
			for ; n > 0; n-- {
				c.events[i] = append(c.events[i], at)
			}
			c.mu.Unlock()
		}
		c.nodes = append(c.nodes, g)
		c.paths[i] = map[sluice.Path]int{}
	}
	c.start = time.Now()
	return c
}

// phase is a stretch of time during which the listed nodes offer load.
type phase struct {
	d    time.Duration
	busy []int
}

// run offers each busy node 2 requests every 3ms (about 670/s, over three times the whole
// limit) on key, phase after phase.
func (c *cluster) run(key string, phases []phase, between func(i int)) {
	ctx := context.Background()
	for pi, ph := range phases {
		if between != nil {
			between(pi)
		}
		end := time.Now().Add(ph.d)
		c.mu.Lock()
		c.expected += int(ph.d/(3*time.Millisecond)) * len(ph.busy)
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, i := range ph.busy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(3 * time.Millisecond)
				defer tick.Stop()
				for time.Now().Before(end) {
					<-tick.C
					c.mu.Lock()
					c.ticks++
					c.mu.Unlock()
					for k := 0; k < 2; k++ {
						d, err := c.nodes[i].AllowN(ctx, key, globalLimit, 1)
						if err != nil {
							c.t.Error(err)
							return
						}
						c.mu.Lock()
						c.paths[i][d.Path]++
						c.mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
	}
}

// all returns every node's admissions as µs since the cluster started, sorted.
func (c *cluster) all() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int64
	for _, ev := range c.events {
		for _, at := range ev {
			out = append(out, at.Sub(c.start).Microseconds())
		}
	}
	slices.Sort(out)
	return out
}

func (c *cluster) count(node int, from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, at := range c.events[node] {
		if at.After(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// maxIn returns the most admissions in an open interval of length d.
func maxIn(ev []int64, d int64) int64 {
	var best int64
	j := 0
	for i := range ev {
		for ev[j] <= ev[i]-d {
			j++
		}
		best = max(best, int64(i-j+1))
	}
	return best
}

// overshoot returns the largest excess, over all interval lengths checked, of the
// admissions in an interval of length d above what one limiter could admit in it,
// Burst + ⌊(d-1)/T⌋.
func overshoot(ev []int64, l sluice.Limit, span int64) (worst int64, at int64) {
	T := (l.Period.Microseconds() + l.Rate - 1) / l.Rate
	b := store.EffectiveBurst(l)
	for i, d := range []int64{T, 5 * T, b * T, l.Period.Microseconds() / 2, l.Period.Microseconds(), 2 * l.Period.Microseconds(), span} {
		if x := maxIn(ev, d) - (b + (d-1)/T); x > worst || i == 0 {
			worst, at = x, d
		}
	}
	return worst, at
}

// TestGlobalOvershootWithinBound: three nodes in two regions, under demand that moves
// between them, for several sync intervals. The documented bound: in any interval of
// length d the nodes together admit at most Burst + ⌊(d-1)/T⌋ + N units (N = 3 nodes,
// from rounding each node's bucket up to one unit), whatever the sync interval.
func TestGlobalOvershootWithinBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	phases := []phase{
		{800 * time.Millisecond, []int{0, 1, 2}},
		{800 * time.Millisecond, []int{0}},
		{800 * time.Millisecond, []int{2}},
		{800 * time.Millisecond, []int{1, 2}},
	}
	var total time.Duration
	for _, p := range phases {
		total += p.d
	}
	for _, interval := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, srv, WithSyncInterval(interval))
			c.run("bound-"+interval.String(), phases, nil)
			ev := c.all()
			over, d := overshoot(ev, globalLimit, total.Microseconds())
			if over > 3 {
				t.Errorf("overshoot %d units in an interval of %dµs; bound 3", over, d)
			}
			allowed := float64(globalLimit.Burst) + float64(globalLimit.Rate)*total.Seconds()
			t.Logf("sync %v: %d admitted of %.0f allowed (%.1f%%); worst overshoot %d units (interval %dµs)",
				interval, len(ev), allowed, 100*float64(len(ev))/allowed, over, d)
			if float64(len(ev)) < 0.25*allowed && !c.starved() { // liveness; the figure is the benchmark
				t.Errorf("only %d of %.0f admitted: the shares do not follow demand", len(ev), allowed)
			}
		})
	}
}

// TestGlobalCutKeepsShares: with all three nodes busy, region B's node (n3) loses the
// shared Redis. Until its lease runs out it keeps deciding from its last share, never
// more; then it fences itself (denies); the shared Redis frees its share only after 1.5
// leases, to the others. The global bound holds throughout, and n3 recovers its share
// when the link comes back.
func TestGlobalCutKeepsShares(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const interval, lease = 20 * time.Millisecond, time.Second
	c := newCluster(t, srv, WithSyncInterval(interval), WithLease(lease), WithSyncTimeout(500*time.Millisecond))
	key := "cut"
	all := []int{0, 1, 2}
	var shareAtCut int64
	var cutAt, healAt time.Time
	var sharesAtHeal [2]int64
	c.run(key, []phase{{time.Second, all}, {2500 * time.Millisecond, all}, {1500 * time.Millisecond, all}}, func(i int) {
		switch i {
		case 1:
			// On a starved machine the first syncs may be slow: wait for n3's share.
			var st Stats
			poll.UntilDescribed(t, 10*time.Second, "n3 holding a share before the cut", func() bool {
				st, _ = c.nodes[2].Stats(key, globalLimit)
				return st.Share > 0
			}, func() string { return fmt.Sprintf("%+v", st) })
			shareAtCut = st.Share
			c.proxy.SetRefuse(true)
			c.proxy.Cut()
			cutAt = time.Now()
		case 2:
			for j := range sharesAtHeal {
				st, _ := c.nodes[j].Stats(key, globalLimit)
				sharesAtHeal[j] = st.Share
			}
			c.proxy.SetRefuse(false)
			healAt = time.Now()
		}
	})
	T := time.Duration(globalLimit.Period.Nanoseconds()/globalLimit.Rate) * time.Nanosecond
	// Within the lease: at most its share of the rate, plus its share of the burst (at
	// least one unit), plus one.
	within := c.count(2, cutAt, cutAt.Add(lease))
	capUnits := max(1, globalLimit.Burst*shareAtCut/pool)
	limit := int(float64(shareAtCut)/pool*float64(lease)/float64(T)) + int(capUnits) + 1
	if within > limit {
		t.Errorf("cut node admitted %d in its lease with share %d ppm; at most %d", within, shareAtCut, limit)
	}
	starved := c.starved()
	if within == 0 && !starved {
		t.Errorf("cut node admitted nothing within its lease: it should keep its share")
	}
	// After the lease (and a decision's worth of slack) it admits nothing until healed.
	if n := c.count(2, cutAt.Add(lease+interval), healAt); n != 0 {
		t.Errorf("cut node admitted %d after its lease ran out", n)
	}
	c.mu.Lock()
	local := c.paths[2][sluice.PathLocal]
	c.mu.Unlock()
	if local == 0 {
		t.Error("no decision of the cut node reported PathLocal")
	}
	// The others took over the freed share after 1.5 leases.
	if got := sharesAtHeal[0] + sharesAtHeal[1]; got < pool*9/10 && !starved {
		t.Errorf("n1+n2 hold %d ppm at the end of the cut; n3's share was not freed", got)
	}
	late := c.count(0, healAt.Add(-400*time.Millisecond), healAt) + c.count(1, healAt.Add(-400*time.Millisecond), healAt)
	// n3 is back after the link heals.
	if n := c.count(2, healAt.Add(500*time.Millisecond), time.Now()); n == 0 && !starved {
		t.Error("n3 admitted nothing after the link healed")
	}
	ev := c.all()
	if over, d := overshoot(ev, globalLimit, time.Since(c.start).Microseconds()); over > 3 {
		t.Errorf("overshoot %d units in an interval of %dµs; bound 3", over, d)
	}
	t.Logf("share at cut %d ppm; cut node admitted %d in its lease (limit %d); at the end of the cut n1+n2 hold %v ppm and admitted %d in its last 400ms",
		shareAtCut, within, limit, sharesAtHeal, late)
}

// TestGlobalFirstDecisionWithoutRedis: a limit never seen, with the shared Redis
// unreachable, is denied (no share is known) after one sync attempt, with PathLocal.
func TestGlobalFirstDecisionWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	backend, err := redisstore.Open("redis://"+proxy.Addr(), redisstore.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	g, err := NewGlobal(backend, WithSyncInterval(20*time.Millisecond), WithSyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()
	d, err := g.AllowN(ctx, "first", globalLimit, 1)
	if err != nil || !d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("first decision on a fresh limit: %+v %v, want allowed (fresh: the whole burst)", d, err)
	}
	proxy.SetRefuse(true)
	proxy.Cut()
	d, err = g.AllowN(ctx, "second", globalLimit, 1)
	if err != nil || d.Allowed || d.Path != sluice.PathLocal || d.RetryAfter <= 0 {
		t.Fatalf("first decision without Redis: %+v %v, want denied on PathLocal with a RetryAfter", d, err)
	}
	if _, err := g.AllowN(ctx, "k", globalLimit, globalLimit.Burst+1); !errors.Is(err, sluice.ErrCostExceedsLimit) {
		t.Fatalf("cost above burst: %v", err)
	}
	g.Close()
	if _, err := g.AllowN(ctx, "first", globalLimit, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestGlobalRejectsWindowLimits: a window limit is an error wrapping ErrInvalidLimit,
// for AllowN and Reset, and creates no state; it was once decided as a bucket.
func TestGlobalRejectsWindowLimits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	backend, err := redisstore.Open(srv.URL(), redisstore.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	g, err := NewGlobal(backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		l := globalLimit.With(a)
		if d, err := g.AllowN(ctx, "w", l, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("AllowN under %v: %+v, %v; want an error wrapping ErrInvalidLimit", l, d, err)
		}
		if err := g.Reset(ctx, "w", l); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("Reset under %v: %v; want an error wrapping ErrInvalidLimit", l, err)
		}
		if _, ok := g.Stats("w", l); ok {
			t.Errorf("%v: state kept for a rejected limit", l)
		}
	}
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		if _, err := g.AllowN(ctx, "b", globalLimit.With(a), 1); err != nil {
			t.Errorf("%v: %v", a, err)
		}
	}
}

// newEntry is a node's bucket for l, outside any Global.
func newEntry(l sluice.Limit) *entry {
	full := algo.ParamsOf(l)
	e := &entry{id: entryKey{limit: l}, full: full, p: full, empty: true, vnow: 1}
	e.p.Burst = 0
	return e
}

// TestNodeBucketIsAlgo: with the whole share, a node's bucket decides every request as
// algo.GCRA does on the same clock (and so as TokenBucket and LeakyBucket do), its
// Results converted to local time unchanged; with a share w, as GCRA under the limit with
// w of its burst on a clock running at w of real time.
func TestNodeBucketIsAlgo(t *testing.T) {
	for _, l := range []sluice.Limit{
		{Rate: 200, Period: time.Second, Burst: 20},
		{Rate: 7, Period: time.Second, Burst: 3}, // S > 1
		{Rate: 3, Period: 7 * time.Millisecond},
	} {
		for _, share := range []int64{pool, 500_000, 333_333} {
			rng := rand.New(rand.NewPCG(uint64(share), uint64(l.Rate)))
			e := newEntry(l)
			e.setShare(share, 0)
			e.st, e.empty = algo.State{}, false // full, as a fresh limit's first share
			p := algo.ParamsOf(l.With(sluice.GCRA))
			p.Burst = e.p.Burst
			var gs algo.State
			const start = 1_000_000
			now := int64(0)
			for i := 0; i < 20000; i++ {
				now += rng.Int64N(2 * p.T)
				n := rng.Int64N(min(p.Burst, 3) + 1)
				got, ok := e.decide(now, n, true)
				// The share clock at now: ⌊now·share/pool⌋ µs after its start.
				v := start + now*share/pool
				var want algo.Result
				gs, want = algo.GCRA(gs, v, p, n)
				if !ok || got != want {
					t.Fatalf("%v share %d step %d: node %+v (%v), gcra %+v", l, share, i, got, ok, want)
				}
				if share == pool {
					if e.real(got.RetryAfter) != time.Duration(got.RetryAfter)*time.Microsecond {
						t.Fatalf("%v: with the whole share, RetryAfter %d became %v", l, got.RetryAfter, e.real(got.RetryAfter))
					}
				}
			}
		}
	}
}

// TestNodeBucketExtremes checks the share clock's integer arithmetic at the extremes of a
// valid limit: filling takes exactly the time reported, and long idle spells neither
// overflow nor grant more than the node's depth.
func TestNodeBucketExtremes(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		share int64
	}{
		{sluice.Limit{Rate: 1 << 40, Period: 1 << 50 * time.Microsecond, Burst: 1 << 40}, 1},
		{sluice.Limit{Rate: 1, Period: store.MaxPeriod, Burst: 1}, pool},
		{sluice.Limit{Rate: 200, Period: time.Second, Burst: 20}, 333_333},
		{sluice.Limit{Rate: 7, Period: time.Second, Burst: 10}, 1},
	}
	for _, tt := range tests {
		if err := tt.limit.Validate(); err != nil {
			t.Fatalf("%v: %v", tt.limit, err)
		}
		e := newEntry(tt.limit)
		e.setShare(tt.share, 0)
		depth := e.p.Burst
		if depth < 1 {
			t.Fatalf("%v share %d: depth %d below one unit", tt.limit, tt.share, depth)
		}
		r, ok := e.decide(0, 0, true)
		w := e.real(r.ResetAfter).Microseconds()
		if !ok || r.Remaining != 0 || w <= 0 {
			t.Fatalf("%v share %d: a new bucket %+v (%v), time to fill %d", tt.limit, tt.share, r, ok, w)
		}
		if r, _ := e.decide(w-1, 0, true); r.Remaining == depth {
			t.Fatalf("%v share %d: full 1µs before the computed time (%d)", tt.limit, tt.share, w)
		}
		if r, _ := e.decide(w, 0, true); r.Remaining != depth || r.ResetAfter != 0 {
			t.Fatalf("%v share %d: %+v at the computed time %d, depth %d", tt.limit, tt.share, r, w, depth)
		}
		if r, _ := e.decide(w+1<<55, 0, true); r.Remaining != depth { // a very long idle spell
			t.Fatalf("%v: %+v after a long idle spell, depth %d", tt.limit, r, depth)
		}
	}
}

func algoParams(l sluice.Limit) algo.Params { return algo.ParamsOf(l.With(sluice.GCRA)) }

// TestGlobalDecideAllOrNothing: a request of two limits that one of them denies spends
// nothing of the other: its decision is not allowed with RetryAfter 0 (alone it would
// pass) and the other limit's full Remaining, no unit of it is admitted, and all of that
// Remaining is still there afterwards. A request both fit spends both.
func TestGlobalDecideAllOrNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	backend, err := redisstore.Open(srv.URL(), redisstore.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	g, err := NewGlobal(backend, WithNode("solo"), WithSyncInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	var mu sync.Mutex
	var admitted int64
	g.onAdmit = func(_ time.Time, n int64) {
		mu.Lock()
		admitted += n
		mu.Unlock()
	}
	spent := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return admitted
	}
	// Hour-long periods: nothing refills during the test.
	small := sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Hour, Burst: 2}
	big := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour, Burst: 10}
	ctx := context.Background()
	ds := make([]sluice.Decision, 2)

	both := []sluice.Request{{Key: "tenant", Limit: small, N: 2}, {Key: "tenant", Limit: big, N: 2}}
	if _, err := g.Decide(ctx, both, ds); err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || !ds[1].Allowed || ds[0].Remaining != 0 || ds[1].Remaining != 8 || spent() != 4 {
		t.Fatalf("a request both limits fit: %+v, %d units admitted; want both spent (0 and 8 left)", ds, spent())
	}

	denied := []sluice.Request{{Key: "tenant", Limit: small, N: 1}, {Key: "tenant", Limit: big, N: 3}}
	for i := range 3 {
		rep, err := g.Decide(ctx, denied, ds)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.StoreCalled {
			t.Errorf("call %d: Report %+v, want StoreCalled", i, rep)
		}
		if ds[0].Allowed || ds[0].RetryAfter <= 0 || ds[0].Limit != small {
			t.Fatalf("call %d, the exhausted limit: %+v, want denied with a RetryAfter", i, ds[0])
		}
		if ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 8 || ds[1].Limit != big {
			t.Fatalf("call %d, the limit with room: %+v, want not allowed, RetryAfter 0, Remaining 8", i, ds[1])
		}
	}
	if got := spent(); got != 4 {
		t.Fatalf("%d units admitted after the denied requests, want still 4", got)
	}
	// All 8 units of the big limit are still there, and no more.
	if d, err := g.AllowN(ctx, "tenant", big, 8); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the big limit's 8 remaining units: %+v, %v", d, err)
	}
	if d, err := g.AllowN(ctx, "tenant", big, 1); err != nil || d.Allowed {
		t.Fatalf("a unit beyond them: %+v, %v", d, err)
	}
	if got := spent(); got != 12 {
		t.Errorf("%d units admitted, want 12", got)
	}

	// Bad input spends nothing either; and the node offers no reservations.
	dup := []sluice.Request{{Key: "tenant", Limit: big, N: 1}, {Key: "tenant", Limit: big, N: 1}}
	if rep, err := g.Decide(ctx, dup, ds); !errors.Is(err, sluice.ErrInvalidKey) || rep.Kind != store.KindBadInput {
		t.Errorf("a key and limit twice: %+v, %v; want ErrInvalidKey", rep, err)
	}
	if _, err := g.Decide(ctx, both, ds[:1]); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("two requests, room for one decision: %v; want ErrInvalidCost", err)
	}
	if _, err := g.Reserve(ctx, "tenant", big, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("Reserve: %v, want ErrInvalidLimit", err)
	}
	if got := spent(); got != 12 {
		t.Errorf("%d units admitted after bad input, want 12", got)
	}
}

// TestSetShareKeepsCredit: a share change keeps what the bucket holds, up to the new depth;
// a bucket whose share grows starts the growth empty, and one whose share drops to 0 is
// emptied.
func TestSetShareKeepsCredit(t *testing.T) {
	l := sluice.Limit{Rate: 100, Period: time.Second, Burst: 10} // one unit per 10ms
	e := newEntry(l)
	e.setShare(pool, 0)
	now := int64(40_000) // 4 units earned
	if r, _ := e.decide(now, 0, true); r.Remaining != 4 {
		t.Fatalf("after 40ms at the whole share: %+v", r)
	}
	e.setShare(pool/5, now) // depth 2
	if r, _ := e.decide(now, 0, true); r.Remaining != 2 {
		t.Fatalf("at a fifth of the share: %+v, want the depth 2", r)
	}
	e.setShare(pool, now) // depth 10 again: the 2 kept, the rest to refill
	if r, _ := e.decide(now, 0, true); r.Remaining != 2 || e.real(r.ResetAfter) != 80*time.Millisecond {
		t.Fatalf("back at the whole share: %+v, want 2 and full in 80ms", r)
	}
	e.setShare(0, now)
	if r, ok := e.decide(now+time.Hour.Microseconds(), 1, true); ok || r.Allowed {
		t.Fatalf("without a share: %+v %v", r, ok)
	}
	e.setShare(pool, now+time.Hour.Microseconds()) // emptied, and nothing earned meanwhile
	if r, _ := e.decide(now+time.Hour.Microseconds(), 0, true); r.Remaining != 0 {
		t.Fatalf("after an hour without a share: %+v, want an empty bucket", r)
	}
}

// TestGlobalSyncAfterScriptFlush: a sync whose EVALSHA finds no script (SCRIPT FLUSH, a
// restarted or failed-over Redis) sends it again with EVAL and succeeds.
func TestGlobalSyncAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	backend, err := redisstore.Open(srv.URL(), redisstore.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	g, err := NewGlobal(backend, WithSyncInterval(time.Hour), WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()
	for _, key := range []string{"a", "b"} {
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		// A new limit waits for its first sync, which it triggers.
		if d, err := g.AllowN(ctx, key, globalLimit, 1); err != nil || !d.Allowed || d.Path != sluice.PathStore {
			t.Fatalf("%s after SCRIPT FLUSH: %+v %v, want allowed by the store's share", key, d, err)
		}
		if st, ok := g.Stats(key, globalLimit); !ok || st.Unreachable || st.Share == 0 {
			t.Fatalf("%s after SCRIPT FLUSH: stats %+v %v, want a share from a successful sync", key, st, ok)
		}
	}
}
