package table

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// hashes gives each key a hash drawn from a few tags, so that probe runs are long, and
// from tags near the top of the range, so that runs wrap past the end of the table.
type hashes struct {
	rng *rand.Rand
	of  map[string]uint64
}

func (hs *hashes) hash(key string) uint64 {
	if h, ok := hs.of[key]; ok {
		return h
	}
	var tag uint32
	switch hs.rng.IntN(3) {
	case 0:
		tag = ^uint32(0) - uint32(hs.rng.IntN(1<<24)) // homes at the end: runs wrap
	case 1:
		tag = uint32(hs.rng.IntN(4)) << 30 // four tags: collisions
	default:
		tag = hs.rng.Uint32()
	}
	h := uint64(tag)<<32 | uint64(hs.rng.Uint32())
	hs.of[key] = h
	return h
}

// check asserts that t holds exactly want and that every key is reachable from its home
// without crossing an empty slot (the backward-shift invariant).
func check(t *testing.T, tb *Table[int], want map[string]int, hs *hashes, step string) {
	t.Helper()
	if tb.Len() != len(want) {
		t.Fatalf("%s: Len %d, want %d", step, tb.Len(), len(want))
	}
	if c := tb.Cap(); c > 0 && tb.Len() >= c {
		t.Fatalf("%s: %d keys in %d slots: no empty slot ends a probe", step, tb.Len(), c)
	}
	used := 0
	for i := range tb.Cap() {
		e := tb.At(i)
		if !e.Used() {
			continue
		}
		used++
		k := e.Key()
		v, ok := want[k]
		if !ok || v != e.V {
			t.Fatalf("%s: slot %d holds %q=%d, want %v (present %v)", step, i, k, e.V, v, ok)
		}
		for j := Home(Tag(hs.hash(k)), tb.Cap()); j != i; j = (j + 1) % tb.Cap() {
			if !tb.At(j).Used() {
				t.Fatalf("%s: %q at %d is cut off from its home by the empty slot %d", step, k, i, j)
			}
		}
	}
	if used != len(want) {
		t.Fatalf("%s: %d slots used, want %d", step, used, len(want))
	}
}

// TestTableAgainstMap runs random sequences of inserts, deletes, lookups, shrinks and
// resets on a Table and on a Go map, and demands the same contents after every step.
func TestTableAgainstMap(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			hs := &hashes{rng: rng, of: map[string]uint64{}}
			var tb Table[int]
			want := map[string]int{}
			universe := 8 + rng.IntN(300) // small universes fill the table; large ones grow it
			for step := range 3000 {
				k := fmt.Sprintf("k%d", rng.IntN(universe))
				h := hs.hash(k)
				i := tb.Find(k, h)
				v, ok := want[k]
				if (i >= 0) != ok || ok && tb.At(i).V != v {
					t.Fatalf("step %d: Find(%q) = %d, map has %d, %v", step, k, i, v, ok)
				}
				what := ""
				switch r := rng.IntN(100); {
				case r < 50 && !ok:
					what = "insert"
					j := tb.Insert(k, h, step)
					if rng.IntN(2) == 0 {
						what = "add"
						tb.Delete(j)
						var added bool
						if j, added = tb.Add(k, h, step); !added {
							t.Fatalf("step %d: Add(%q) of an absent key added nothing", step, k)
						}
					}
					if tb.At(j).Key() != k || tb.At(j).V != step {
						t.Fatalf("step %d: Insert(%q) returned slot %d holding %q", step, k, j, tb.At(j).Key())
					}
					want[k] = step
				case r < 50:
					what = "update"
					if j, added := tb.Add(k, h, -1); added || j != i {
						t.Fatalf("step %d: Add(%q) of a present key at %d gave %d, %v", step, k, i, j, added)
					}
					tb.At(i).V = step
					want[k] = step
				case r < 90 && ok:
					what = "delete"
					tb.Delete(i)
					delete(want, k)
				case r < 95:
					what = "shrink"
					tb.Shrink()
				case r < 96:
					what = "reset"
					tb.Reset(rng.IntN(universe))
					clear(want)
				}
				check(t, &tb, want, hs, fmt.Sprintf("step %d (%s %q)", step, what, k))
			}
		})
	}
}

// TestTableFillsWithoutGrowing: after Reset(n), n inserts never grow the table, and a table
// at its load limit still ends every probe at an empty slot, wrap-around included.
func TestTableFillsWithoutGrowing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		hs := &hashes{rng: rng, of: map[string]uint64{}}
		var tb Table[int]
		tb.Reset(n)
		c := tb.Cap()
		want := map[string]int{}
		for i := range n {
			k := fmt.Sprint(i)
			tb.Insert(k, hs.hash(k), i)
			want[k] = i
		}
		if tb.Cap() != c {
			t.Fatalf("Reset(%d) gave %d slots, and %d inserts grew them to %d", n, c, n, tb.Cap())
		}
		check(t, &tb, want, hs, fmt.Sprintf("n=%d", n))
		if tb.Find("absent", hs.hash("absent")) >= 0 {
			t.Fatalf("n=%d: found an absent key", n)
		}
		for !tb.Full() {
			k := fmt.Sprint("x", tb.Len())
			tb.Insert(k, hs.hash(k), 0)
			want[k] = 0
		}
		check(t, &tb, want, hs, fmt.Sprintf("n=%d, full", n))
	}
}

// TestResetDropsKeys: Reset(0) leaves no reference to a key in the slots it cleared, nor
// in those a later Reset reslices into use.
func TestResetDropsKeys(t *testing.T) {
	var tb Table[struct{}]
	tb.Reset(100)
	for i := range 100 {
		k := fmt.Sprint(i)
		tb.Insert(k, uint64(i)<<40, struct{}{})
	}
	tb.Reset(0)
	tb.Reset(100)
	for i := range tb.Cap() {
		if tb.At(i).Used() {
			t.Fatalf("slot %d still holds %q after Reset", i, tb.At(i).Key())
		}
	}
}

// TestFills checks Fills against its definition, by walking the cycle from i to j.
func TestFills(t *testing.T) {
	for c := 1; c <= 9; c++ {
		for i := range c {
			for j := range c {
				if j == i {
					continue
				}
				for k := range c {
					inRun := false // k in (i, j], cyclically
					for x := (i + 1) % c; ; x = (x + 1) % c {
						if x == k {
							inRun = true
						}
						if x == j {
							break
						}
					}
					if got := Fills(i, j, k); got == inRun {
						t.Errorf("c=%d: Fills(%d, %d, %d) = %v", c, i, j, k, got)
					}
				}
			}
		}
	}
}
