package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// lockFreeAlgs are the algorithms whose classes decide without the shard lock: the three
// names of the bucket machine (gcra.go, or pair.go when S > 1) and FixedWindow (pair.go).
var lockFreeAlgs = []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket, sluice.FixedWindow}

// lockFreeCase is one lock-free class under test: an algorithm, and for the bucket
// algorithms whether the limit's Rate divides its Period. The bucket algorithms keep a
// one-word slot (gcra.go) when it does and a two-word one (pair.go) when it does not, so
// both are run.
type lockFreeCase struct {
	alg        sluice.Algorithm
	fractional bool // Rate does not divide Period (algo.Params.S > 1)
}

func (c lockFreeCase) String() string {
	if c.fractional {
		return c.alg.String() + "/fractional"
	}
	return c.alg.String()
}

// rate returns a rate for the case near want: want itself, or the next one up that
// divides (or does not divide) period.
func (c lockFreeCase) rate(want int64, period time.Duration) int64 {
	for r := want; ; r++ {
		if (period.Microseconds()%r != 0) == c.fractional {
			return r
		}
	}
}

func lockFreeCases() []lockFreeCase {
	var cs []lockFreeCase
	for _, a := range lockFreeAlgs {
		cs = append(cs, lockFreeCase{alg: a})
		if a != sluice.FixedWindow {
			cs = append(cs, lockFreeCase{alg: a, fractional: true})
		}
	}
	return cs
}

// TestLockFreeUnderRebuilds races lock-free decisions against inserts that rebuild the one
// shard's table over and over, and against multi-limit batches that freeze slots. With the
// clock standing still every key must admit exactly its burst, never more.
func TestLockFreeUnderRebuilds(t *testing.T) {
	for _, c := range lockFreeCases() {
		t.Run(c.String(), func(t *testing.T) { testLockFreeUnderRebuilds(t, c) })
	}
}

func testLockFreeUnderRebuilds(t *testing.T, c lockFreeCase) {
	ctx := context.Background()
	s, _ := newTestStore(t, WithShards(1), WithSweepInterval(0))
	const nkeys = 3000
	burst := c.rate(7, time.Hour)
	a := sluice.PerHour(burst)
	a.Algorithm = c.alg
	b := sluice.PerMinute(1000) // a second class, for batches
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	admitted := make([]atomic.Int64, nkeys)
	batched := make([]atomic.Int64, nkeys) // admitted by batches, the only spenders of b
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 6000; i++ {
				k := rng.IntN(nkeys)
				if g%4 == 0 { // a batch: both limits or neither
					ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: keys[k], Limit: a, N: 1}, {Key: keys[k], Limit: b, N: 1}})
					if err != nil {
						t.Error(err)
						return
					}
					if ds[0].Allowed != ds[1].Allowed {
						t.Errorf("split batch decision %+v", ds)
						return
					}
					if ds[0].Allowed {
						admitted[k].Add(1)
						batched[k].Add(1)
					}
					continue
				}
				d, err := s.AllowN(ctx, keys[k], a, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		got := admitted[k].Load()
		if got > burst {
			t.Fatalf("key %d admitted %d, burst %d", k, got, burst)
		}
		// What the store says is left must agree with what was admitted.
		d, _ := s.AllowN(ctx, keys[k], a, 0)
		if got+d.Remaining != burst {
			t.Fatalf("key %d: admitted %d + remaining %d != %d", k, got, d.Remaining, burst)
		}
		if d, _ := s.AllowN(ctx, keys[k], b, 0); batched[k].Load()+d.Remaining != b.MaxCost() {
			t.Fatalf("key %d: batches admitted %d but b has %d left of %d", k, batched[k].Load(), d.Remaining, b.MaxCost())
		}
	}
}

// TestSweepAndResetWithLockFreeReaders: sweeping, resets and rebuilds while readers
// decide; afterwards every idle key is gone and the table holds only live keys.
func TestSweepAndResetWithLockFreeReaders(t *testing.T) {
	for _, c := range lockFreeCases() {
		t.Run(c.String(), func(t *testing.T) { testSweepAndResetWithLockFreeReaders(t, c) })
	}
}

func testSweepAndResetWithLockFreeReaders(t *testing.T, c lockFreeCase) {
	ctx := context.Background()
	s, clk := newTestStore(t, WithShards(2), WithSweepInterval(time.Millisecond))
	l := sluice.PerSecond(c.rate(5, time.Second))
	l.Algorithm = c.alg
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprintf("k%d", (i*7+g)%500)
				if i%50 == 0 {
					s.Reset(ctx, k, l)
				}
				if _, err := s.AllowN(ctx, k, l, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	clk.Advance(2 * time.Second)
	s.Close() // the background sweeper stops; the test sweeps from here
	sweepUntilEmpty(t, s)
}

// TestSlotsBeginWithHeader: the generic table reaches a slot's key, meta and control word
// by converting a slot pointer to *lhdr (hdr), which is right only if every slot type
// starts with an lhdr.
func TestSlotsBeginWithHeader(t *testing.T) {
	var g gslot
	var p pslot
	if unsafe.Pointer(hdr(&g)) != unsafe.Pointer(&g.lhdr) || unsafe.Offsetof(g.lhdr) != 0 {
		t.Fatal("gslot does not begin with its lhdr")
	}
	if unsafe.Pointer(hdr(&p)) != unsafe.Pointer(&p.lhdr) || unsafe.Offsetof(p.lhdr) != 0 {
		t.Fatal("pslot does not begin with its lhdr")
	}
	if unsafe.Sizeof(g) != 24 || unsafe.Sizeof(p) != 32 {
		t.Fatalf("slot sizes %d and %d, documented as 24 and 32", unsafe.Sizeof(g), unsafe.Sizeof(p))
	}
}

// TestGCRASlotKind: a GCRA, TokenBucket or LeakyBucket limit whose Rate divides its Period
// keeps GCRA's TAT in one word (gcraClass); one whose TAT has a part below 1µs keeps two
// (pairClass).
func TestGCRASlotKind(t *testing.T) {
	s, _ := newTestStore(t)
	var gone atomic.Bool
	for i, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		if c := newClass(s, sluice.PerSecond(10).With(a), 2*i, &gone); reflect.TypeOf(c) != reflect.TypeOf(&gcraClass{}) {
			t.Errorf("%v 10/s: class %T, want *gcraClass", a, c)
		}
		if c := newClass(s, sluice.PerSecond(7).With(a), 2*i+1, &gone); reflect.TypeOf(c) != reflect.TypeOf(&pairClass{}) {
			t.Errorf("%v 7/s: class %T, want *pairClass", a, c)
		}
	}
}
