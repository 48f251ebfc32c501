package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// reuseCase is a lock-free class under test with a limit of a large burst, so that no
// decision in these tests is denied (a denial writes nothing, and could not show a stale
// write).
func (c lockFreeCase) limit() sluice.Limit {
	l := sluice.PerHour(c.rate(1<<20, time.Hour))
	l.Algorithm = c.alg
	return l
}

// fastOn runs the class's lock-free decision on slot i of array a as if find had matched
// it with meta m, reporting whether it decided.
func fastOn(t *testing.T, c class, i int, m uint64, now, n int64) bool {
	switch g := c.(type) {
	case *gcraClass:
		a := g.shards[0].arr.Load()
		_, ok := g.fast(&a.slots[i].ctl, m, now, n)
		return ok
	case *pairClass:
		a := g.shards[0].arr.Load()
		_, ok := g.fast(&a.slots[i], m, now, n)
		return ok
	}
	t.Fatalf("class %T is not lock-free", c)
	return false
}

// slotOf returns key's slot in class c's only shard, the meta it matched, and the
// control word there.
func slotOf(t *testing.T, s *Store, c class, key string) (int, uint64, int64) {
	t.Helper()
	var i int
	var m uint64
	var ctl int64
	switch g := c.(type) {
	case *gcraClass:
		a := g.shards[0].arr.Load()
		i, m = a.find(key, s.hash(key))
		if i >= 0 {
			ctl = a.slots[i].ctl.Load()
		}
	case *pairClass:
		a := g.shards[0].arr.Load()
		i, m = a.find(key, s.hash(key))
		if i >= 0 {
			ctl = a.slots[i].ctl.Load()
		}
	}
	if i < 0 {
		t.Fatalf("%q has no slot", key)
	}
	return i, m, ctl
}

// TestReusedSlotRefusesAStaleDecider replays the ABA interleaving step by step: a
// lock-free decider matches key k in slot i, then k is deleted and slot i given to
// another key whose state word is the very one the decider read (both were decided once,
// at the same instant). Without the generation the decider's swap would succeed and
// charge the other key; with it the decider gives up and the other key keeps its state.
func TestReusedSlotRefusesAStaleDecider(t *testing.T) {
	ctx := context.Background()
	for _, c := range lockFreeCases() {
		t.Run(c.String(), func(t *testing.T) {
			s, clk := newTestStore(t, WithShards(1), WithSweepInterval(0))
			l := c.limit()
			if _, err := s.AllowN(ctx, "k", l, 1); err != nil {
				t.Fatal(err)
			}
			r, err := s.class(&l)
			if err != nil {
				t.Fatal(err)
			}
			i, m, ctl := slotOf(t, s, r.c, "k")
			// The decider is now between its find and its swap. k goes:
			if err := s.Reset(ctx, "k", l); err != nil {
				t.Fatal(err)
			}
			// and another key whose home is slot i takes the slot.
			var other string
			for j := 0; other == ""; j++ {
				if k := fmt.Sprintf("other-%d", j); lhome(gmeta(k, s.hash(k)), slotCount(r.c)) == i {
					other = k
				}
			}
			if _, err := s.AllowN(ctx, other, l, 1); err != nil {
				t.Fatal(err)
			}
			j, m2, ctl2 := slotOf(t, s, r.c, other)
			if j != i {
				t.Fatalf("%q went to slot %d, not %d", other, j, i)
			}
			if ctl2&valMask != ctl&valMask {
				t.Fatalf("state words differ (%d, %d): the replay does not test the swap", ctl&valMask, ctl2&valMask)
			}
			if ctl2 == ctl {
				t.Fatalf("control word %#x reused unchanged for another key", ctl)
			}
			if fastOn(t, r.c, i, m, clk.Micros(), 1) {
				t.Fatal("a decider that matched the slot's old key decided on the new key's state")
			}
			if d, _ := s.AllowN(ctx, other, l, 0); d.Remaining != l.MaxCost()-1 {
				t.Fatalf("%q has %d left after one unit, want %d", other, d.Remaining, l.MaxCost()-1)
			}
			// The same decider, knowing the new use of the slot, decides.
			if !fastOn(t, r.c, i, m2, clk.Micros(), 1) {
				t.Fatal("a current decider gave up")
			}
		})
	}
}

func slotCount(c class) int {
	switch g := c.(type) {
	case *gcraClass:
		return len(g.shards[0].arr.Load().slots)
	case *pairClass:
		return len(g.shards[0].arr.Load().slots)
	}
	return 0
}

// TestSlotReuseUnderConcurrency: in one shard, with the clock standing still, deciders
// hammer a few churn keys that a resetter deletes over and over, so their slots are given
// to new keys all the time, while witnesses are inserted one by one into those slots and
// decided once each. A stale decision on a churn key that landed on a witness's state
// would show as a witness with less left than one unit's spend. Run it with -race.
func TestSlotReuseUnderConcurrency(t *testing.T) {
	for _, c := range lockFreeCases() {
		t.Run(c.String(), func(t *testing.T) { testSlotReuseUnderConcurrency(t, c) })
	}
}

func testSlotReuseUnderConcurrency(t *testing.T, c lockFreeCase) {
	ctx := context.Background()
	s, _ := newTestStore(t, WithShards(1), WithSweepInterval(0))
	l := c.limit()
	churn := make([]string, 16)
	for i := range churn {
		churn[i] = fmt.Sprintf("churn-%d", i)
	}
	witnesses := make([]string, 2000)
	for i := range witnesses {
		witnesses[i] = fmt.Sprintf("witness-%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.AllowN(ctx, churn[rng.IntN(len(churn))], l, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.Reset(ctx, churn[i%len(churn)], l)
			if i%8 == 0 {
				runtime.Gosched()
			}
		}
	})
	for i, w := range witnesses {
		if d, err := s.AllowN(ctx, w, l, 1); err != nil || !d.Allowed {
			t.Fatalf("witness %d: %+v, %v", i, d, err)
		}
		if i%2 == 0 { // the witness's slot is freed again for the churn keys
			s.Reset(ctx, w, l)
		}
	}
	close(stop)
	wg.Wait()
	for i, w := range witnesses {
		want := l.MaxCost() - 1
		if i%2 == 0 {
			want = l.MaxCost()
		}
		if d, _ := s.AllowN(ctx, w, l, 0); d.Remaining != want {
			t.Fatalf("witness %d has %d left, want %d: a decision on another key spent its state", i, d.Remaining, want)
		}
	}
}
