package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/clocktest"
)

// The tests below replay, step by step, each window that gcraClass.decide opens between
// its lock-free probe of a missing key and its insert under the lock (missed, place):
// another inserter of the same key, the sweeper, a rebuild and a stale decider each act
// inside the window. Each fails with the check that closes its window removed.

// insertCase is a one-shard GCRA store (PerSecond(1000): a unit is live for 1ms) that
// sweeps, with a background sweeper that never visits within a test (hourly; the tests
// sweep by hand), and keys chosen by their home slot in its array. opts follow those.
type insertCase struct {
	t   *testing.T
	s   *Store
	l   sluice.Limit
	g   *gcraClass
	now func() int64
	clk *clocktest.Clock
}

func newInsertCase(t *testing.T, opts ...Option) (*insertCase, func(time.Duration)) {
	s, clk := newTestStore(t, append([]Option{WithShards(1), WithSweepInterval(time.Hour)}, opts...)...)
	c := &insertCase{t: t, s: s, l: sluice.PerSecond(1000), now: clk.Micros, clk: clk}
	c.allow("first", 1) // the class and its array exist from here on
	r, err := s.class(&c.l)
	if err != nil {
		t.Fatal(err)
	}
	c.g = r.c.(*gcraClass)
	if err := s.Reset(context.Background(), "first", c.l); err != nil {
		t.Fatal(err)
	}
	return c, clk.Advance
}

func (c *insertCase) shard() *lshard[gslot] { return &c.g.shards[0] }

func (c *insertCase) allow(key string, n int64) sluice.Decision {
	c.t.Helper()
	d, err := c.s.AllowN(context.Background(), key, c.l, n)
	if err != nil || (n > 0 && !d.Allowed) {
		c.t.Fatalf("%s, %d: %+v, %v", key, n, d, err)
	}
	return d
}

// keysAt returns n keys (not in avoid) whose home is slot i of the shard's array.
func (c *insertCase) keysAt(i, n int, avoid ...string) []string {
	a := c.shard().arr.Load()
	var out []string
	for j := 0; len(out) < n; j++ {
		k := fmt.Sprintf("k%d", j)
		if lhome(gmeta(k, c.s.hash(k)), len(a.slots)) == i && !contains(avoid, k) {
			out = append(out, k)
		}
	}
	return out
}

func contains(ks []string, k string) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// slot returns key's slot in the shard's array and the meta it matched (-1 if absent).
func (c *insertCase) slot(key string) (int, uint64) {
	return c.shard().arr.Load().find(key, c.s.hash(key))
}

// probeNow is an inserter's first half: seq, then the probe, as decide does them.
func (c *insertCase) probeNow(key string) (uint64, *larray[gslot], probe) {
	sh := c.shard()
	seen := sh.seq.Load()
	a := sh.arr.Load()
	return seen, a, gprobe(a, key, c.s.hash(key), c.now(), c.g.replacer())
}

// left is what a look at key reports left.
func (c *insertCase) left(key string) int64 { return c.allow(key, 0).Remaining }

// TestRacingInsertersOfOneKeyKeepOneState: inserter A probes a missing key k while another
// key's live state sits at k's home, so A's probe chooses the unused slot after it. That
// state empties, and inserter B inserts k into its slot, in place. A then inserts: it must
// find k where B put it and spend there, not insert k a second time.
func TestRacingInsertersOfOneKeyKeepOneState(t *testing.T) {
	c, advance := newInsertCase(t)
	x := "x"
	c.allow(x, 1)
	i, _ := c.slot(x)
	k := c.keysAt(i, 1, x)[0]
	seen, a, p := c.probeNow(k)
	if p.hit || p.i == i {
		t.Fatalf("probe %+v: want a miss that chooses the slot after %d", p, i)
	}
	advance(2 * time.Millisecond) // x's state has emptied
	c.allow(k, 1)                 // inserter B
	if j, _ := c.slot(k); j != i {
		t.Fatalf("B put %q at slot %d, not in place at %d", k, j, i)
	}
	if r := c.g.missed(c.shard(), seen, a, &p, k, c.s.hash(k), c.now(), 1); !r.Allowed { // inserter A
		t.Fatalf("A denied: %+v", r)
	}
	if n := c.s.Len(); n != 1 {
		t.Fatalf("%d states held, want 1 (%q only, x replaced)", n, k)
	}
	if got := c.left(k); got != c.l.MaxCost()-2 {
		t.Fatalf("%q has %d left, want %d: the two units went to two states", k, got, c.l.MaxCost()-2)
	}
}

// TestInsertRacingTheSweeper: A probes a missing key k whose probe run holds z and then w
// (both at k's home), and chooses the unused slot after w. The sweeper then deletes z, whose
// state has emptied, and moves w back into z's slot, which leaves A's slot outside the run.
// A's insert must not put k there, where no lookup would find it.
func TestInsertRacingTheSweeper(t *testing.T) {
	c, advance := newInsertCase(t)
	a0 := c.shard().arr.Load()
	home := lhome(gmeta("z", c.s.hash("z")), len(a0.slots))
	ks := c.keysAt(home, 3)
	z, w, k := ks[0], ks[1], ks[2]
	c.allow(z, 1)   // live 1ms
	c.allow(w, 500) // live 500ms
	iz, _ := c.slot(z)
	iw, _ := c.slot(w)
	seen, a, p := c.probeNow(k)
	if p.hit || p.i == iz || p.i == iw {
		t.Fatalf("probe %+v: want a miss that chooses the slot after %d and %d", p, iz, iw)
	}
	advance(2 * time.Millisecond)
	now := c.now()
	c.s.sweepTime(now) // as the sweeper does before a pass
	c.g.sweep(now)
	if j, _ := c.slot(w); j != iz {
		t.Fatalf("the sweep left %q at %d, not moved back to %d", w, j, iz)
	}
	if r := c.g.missed(c.shard(), seen, a, &p, k, c.s.hash(k), now, 1); !r.Allowed {
		t.Fatalf("A denied: %+v", r)
	}
	if got := c.left(k); got != c.l.MaxCost()-1 {
		t.Fatalf("%q has %d left after one unit, want %d: its state is out of reach", k, got, c.l.MaxCost()-1)
	}
}

// TestInsertRacingARebuild: A probes a missing key k in an array whose states have all
// emptied, choosing an unused slot; the sweeper then deletes them and rebuilds the shard
// into a smaller array. A's insert must land in the new array, not the old one (which
// no lookup reads any more).
func TestInsertRacingARebuild(t *testing.T) {
	c, advance := newInsertCase(t)
	for i := range 60 {
		c.allow(fmt.Sprintf("other-%d", i), 1)
	}
	advance(2 * time.Millisecond) // every state has emptied
	a0 := c.shard().arr.Load()
	var k string
	for j := 0; k == ""; j++ {
		x := fmt.Sprintf("k%d", j)
		if hdr(&a0.slots[lhome(gmeta(x, c.s.hash(x)), len(a0.slots))]).meta.Load()&keyMask == 0 {
			k = x // its home is unused: A's probe chooses it
		}
	}
	seen, a, p := c.probeNow(k)
	if p.hit || hdr(&a.slots[p.i]).meta.Load()&keyMask != 0 {
		t.Fatalf("probe %+v: want a miss that chooses an unused slot", p)
	}
	now := c.now()
	c.s.sweepTime(now)
	for range 16 { // the sweeper's visits, each a slice of the shard
		c.g.sweep(now)
	}
	if c.shard().arr.Load() == a {
		t.Fatal("no rebuild: the array is the one A probed")
	}
	if r := c.g.missed(c.shard(), seen, a, &p, k, c.s.hash(k), now, 1); !r.Allowed {
		t.Fatalf("A denied: %+v", r)
	}
	if got := c.left(k); got != c.l.MaxCost()-1 {
		t.Fatalf("%q has %d left after one unit, want %d: written to the old array", k, got, c.l.MaxCost()-1)
	}
	if n := c.s.Len(); n != 1 {
		t.Fatalf("%d states held, want 1", n)
	}
}

// TestReplacedInPlaceRefusesAStaleDecider: a lock-free decider matches key x in slot i;
// x's state empties and an insert of k gives k slot i in place (place). The decider's
// swap must fail rather than charge k.
func TestReplacedInPlaceRefusesAStaleDecider(t *testing.T) {
	c, advance := newInsertCase(t)
	c.allow("x", 1)
	i, m := c.slot("x")
	advance(2 * time.Millisecond)
	k := c.keysAt(i, 1, "x")[0]
	c.allow(k, 1)
	if j, _ := c.slot(k); j != i {
		t.Fatalf("%q went to slot %d, not in place at %d", k, j, i)
	}
	if n := c.s.Len(); n != 1 {
		t.Fatalf("%d states held, want 1: x was replaced", n)
	}
	a := c.shard().arr.Load()
	if _, ok := c.g.fast(&a.slots[i].ctl, m, c.now(), 1); ok {
		t.Fatal("a decider that matched x decided on k's state")
	}
	if got := c.left(k); got != c.l.MaxCost()-1 {
		t.Fatalf("%q has %d left after one unit, want %d", k, got, c.l.MaxCost()-1)
	}
}

// TestReplacedInPlaceIsInvisibleToABackwardsClock: an insert that replaces an emptied
// state deletes it as the sweeper would, so a clock stepped back to when that state was
// live must not see it missing (Store.now).
func TestReplacedInPlaceIsInvisibleToABackwardsClock(t *testing.T) {
	s, clk := newTestStore(t, WithShards(1), WithSweepInterval(time.Hour)) // sweeps; never ticks here
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000, Period: time.Second, Burst: 5}
	for {
		if d, _ := s.AllowN(ctx, "x", l, 1); !d.Allowed {
			break
		}
	}
	before := clk.Now()
	clk.Advance(time.Hour)
	// Keys until one replaces x in place (the store then holds only that key).
	for j := 0; ; j++ {
		k := fmt.Sprintf("k%d", j)
		if _, err := s.AllowN(ctx, k, l, 1); err != nil {
			t.Fatal(err)
		}
		if s.Len() == 1 {
			break
		}
		if j > 1000 {
			t.Fatal("no insert replaced x")
		}
		s.Reset(ctx, k, l)
	}
	// Stepped back to where x was exhausted, x is decided as of the deletion's time (an
	// hour on), where its burst is whole: it spends it all, and 10ms later, still before
	// that time, it has nothing back. Decided at the old time instead, its state would
	// be a fresh key's there, refilled by then.
	clk.Set(before)
	if d, _ := s.AllowN(ctx, "x", l, l.MaxCost()); !d.Allowed {
		t.Fatalf("after the step back, x's burst: %+v", d)
	}
	clk.Advance(10 * time.Millisecond)
	if d, _ := s.AllowN(ctx, "x", l, 1); d.Allowed {
		t.Fatalf("x refilled before the time its state was deleted as of: %+v", d)
	}
}

// TestInsertWithoutSweepingDeletesNothing: a store that does not sweep
// (WithSweepInterval(0)) deletes no state, so an insert whose probe run holds an emptied
// state takes another slot, and a clock stepped back to when that state was live decides
// it at the clock's time, as a store that keeps every state (Redis within its TTL, the
// differential test) does. Replaced in place, the state was gone and Store.now decided at
// the deletion's time instead, an hour later: its look reported a full burst.
func TestInsertWithoutSweepingDeletesNothing(t *testing.T) {
	c, advance := newInsertCase(t, WithSweepInterval(0))
	x := "x"
	c.allow(x, 5)
	at := c.now()
	before := c.allow(x, 0)
	i, _ := c.slot(x)
	advance(time.Hour) // x's state has long emptied
	k := c.keysAt(i, 1, x)[0]
	c.allow(k, 1)
	if j, _ := c.slot(x); j != i {
		t.Fatalf("%q is at slot %d, not %d: the insert of %q deleted it", x, j, i, k)
	}
	if n := c.s.Len(); n != 2 {
		t.Fatalf("%d states held, want 2 (%q and %q)", n, x, k)
	}
	c.clk.SetMicros(at)
	if got := c.allow(x, 0); got != before {
		t.Fatalf("after the clock stepped back, %q reads %+v, want %+v as before", x, got, before)
	}
}

// TestColdInsertsUnderConcurrency races cold-regime traffic on a few shards (inserts
// that replace emptied states, inserts that sweep a full shard, rebuilds, resets, the
// background sweeper and lock-free decisions) with a clock that moves, then checks the
// tables: no key holds two states, every state is found from its key, and the counts
// agree. Run it with -race.
func TestColdInsertsUnderConcurrency(t *testing.T) {
	const coldOps = 20000 // decisions per goroutine
	ctx := context.Background()
	s, clk := newTestStore(t, WithShards(2), WithSweepInterval(time.Millisecond))
	l := sluice.PerSecond(1000)
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := range coldOps {
				if g == 1 {
					clk.Advance(50 * time.Microsecond) // the clock moves as the traffic goes
				}
				k := keys[rng.IntN(len(keys))]
				if g == 0 && i%64 == 0 {
					s.Reset(ctx, k, l)
					continue
				}
				if _, err := s.AllowN(ctx, k, l, 1+int64(rng.IntN(3))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close() // the sweeper too: the tables hold still from here
	r, err := s.class(&l)
	if err != nil {
		t.Fatal(err)
	}
	g := r.c.(*gcraClass)
	held := 0
	for si := range g.shards {
		sh := &g.shards[si]
		sh.mu.Lock()
		a := sh.arr.Load()
		live := 0
		seen := map[string]int{}
		for j := range a.slots {
			e := &a.slots[j].lhdr
			m := e.meta.Load()
			if m&keyMask == 0 || isSentinel(e.ctl.Load()) {
				continue
			}
			k := unsafeKey(e, m)
			if prev, dup := seen[k]; dup {
				t.Errorf("shard %d: %q holds slots %d and %d", si, k, prev, j)
			}
			seen[k] = j
			if i, _ := a.find(k, s.hash(k)); i != j {
				t.Errorf("shard %d: %q is in slot %d but found at %d", si, k, j, i)
			}
			live++
		}
		if n := int(sh.n); n != live {
			t.Errorf("shard %d counts %d states, holds %d", si, n, live)
		}
		held += live
		sh.mu.Unlock()
	}
	if held != s.Len() {
		t.Errorf("Len %d, tables hold %d", s.Len(), held)
	}
}

// unsafeKey is the key slot header e names under meta m.
func unsafeKey(e *lhdr, m uint64) string { return unsafe.String(e.key.Load(), keyLen(m)) }

// TestGCRAExpiresAtItsTAT: sweepAll and gslot.retire take a one-word class's state word
// as the instant it empties (lhdr.retireTAT); algo.ExpiresAt must agree for every limit
// that gets such a class, or the sweep would delete state that still counts.
func TestGCRAExpiresAtItsTAT(t *testing.T) {
	s := New(WithSweepInterval(time.Hour))
	defer s.Close()
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 100, Period: time.Second},
		{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour, Burst: 50},
		{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Second, Burst: 3},
		{Algorithm: sluice.LeakyBucket, Rate: 1000, Period: time.Second},
	}
	for _, l := range limits {
		r, err := s.class(&l)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := r.c.(*gcraClass)
		if !ok {
			t.Fatalf("%+v: class %T, want *gcraClass", l, r.c)
		}
		if !g.tat {
			t.Fatalf("%+v: gcraClass without tat", l)
		}
		for _, tat := range []int64{0, 1, 1_000_000, maxMicros} {
			if got := algo.ExpiresAt(algo.State{A: tat}, g.p); got != tat {
				t.Errorf("%+v: ExpiresAt(TAT %d) = %d", l, tat, got)
			}
		}
	}
}
