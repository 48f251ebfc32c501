package algo

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
)

// reservableLimits returns every test limit under GCRA, TokenBucket and LeakyBucket.
func reservableLimits() []sluice.Limit {
	var out []sluice.Limit
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		for _, l := range testLimits {
			out = append(out, l.With(a))
		}
	}
	return out
}

// windowBound is the most units the bucket algorithms admit in an open interval of
// length d ≥ 1: Burst + ⌊(d-1)·S/U⌋ (⌊(d-1)·Rate/Period⌋ unless Params falls back).
func windowBound(p Params, d int64) int64 { return p.Burst + MulDiv(d-1, p.S, p.U) }

// TestReserveIsAllowAtItsInstant checks the defining rule: from any state reachable by a
// mix of decisions, reservations and cancellations, Reserve's delay is AllowN's RetryAfter
// (0 when allowed), AllowN at now+Delay allows, and leaves exactly Reserve's state.
func TestReserveIsAllowAtItsInstant(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(l.Rate)))
			p := ParamsOf(l)
			var s State
			now := epoch
			for i := 0; i < 20000; i++ {
				if rng.IntN(8) == 0 {
					now -= rng.Int64N(2 * p.Period) // time going backwards too
				} else {
					now += randomStep(rng, now, p)
				}
				n := 1 + rng.Int64N(min(p.MaxCost(), 3))
				_, allow := Decide(s, now, p, n)
				got, r := ReserveGCRA(s, now, p, n, -1)
				if !r.OK || r.Delay != allow.RetryAfter || r.At != now+r.Delay || r.Delay < 0 {
					t.Fatalf("step %d: reserve %+v, AllowN %+v", i, r, allow)
				}
				want, at := Decide(s, now+r.Delay, p, n)
				if !at.Allowed || want != got || r.Before != s || r.After != got {
					t.Fatalf("step %d: reserve state %+v, AllowN at now+%d gives %+v (%+v)", i, got, r.Delay, want, at)
				}
				// Walk on with a random operation so that states vary.
				switch rng.IntN(3) {
				case 0:
					s = got
				case 1:
					s, _ = Decide(s, now, p, n)
				}
			}
		})
	}
}

// TestReserveMaxWait: a reservation whose delay exceeds maxWait is refused and spends
// nothing; one within it is made.
func TestReserveMaxWait(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(12, uint64(l.Rate)))
			p := ParamsOf(l)
			var s State
			now := epoch
			for i := 0; i < 5000; i++ {
				now += randomStep(rng, now, p) / 4
				n := 1 + rng.Int64N(min(p.MaxCost(), 3))
				_, free := ReserveGCRA(s, now, p, n, -1)
				maxWait := []int64{0, free.Delay - 1, free.Delay, free.Delay + 1, rng.Int64N(p.Period)}[rng.IntN(5)]
				if maxWait < 0 {
					maxWait = 0
				}
				next, r := ReserveGCRA(s, now, p, n, maxWait)
				if r.Delay != free.Delay {
					t.Fatalf("step %d: delay %d with maxWait %d, %d without", i, r.Delay, maxWait, free.Delay)
				}
				if ok := free.Delay <= maxWait; r.OK != ok {
					t.Fatalf("step %d: delay %d, maxWait %d: OK %v", i, r.Delay, maxWait, r.OK)
				}
				if !r.OK && (next != s || r.After != s) {
					t.Fatalf("step %d: refusal changed the state %+v -> %+v", i, s, next)
				}
				s = next
			}
		})
	}
}

// TestReserveZeroCost: n == 0 reserves nothing and waits for nothing.
func TestReserveZeroCost(t *testing.T) {
	for _, l := range reservableLimits() {
		p := ParamsOf(l)
		s, _ := ReserveGCRA(State{}, epoch, p, p.MaxCost(), -1)
		s2, r := ReserveGCRA(s, epoch, p, 0, 0)
		if !r.OK || r.Delay != 0 || s2 != s {
			t.Fatalf("%v: n=0 gives %+v and state %+v -> %+v", l, r, s, s2)
		}
		if _, ok := CancelReservation(s2, epoch-1, r); ok {
			t.Fatalf("%v: cancelling an empty reservation gave something back", l)
		}
	}
}

// TestPacingBound drives one key with reservations, plain decisions and cancellations at
// random times, and collects when units are used: a reservation is used at its instant
// unless its cancellation gave it back; an allowed decision is used at once. No open
// interval of length d admits more than Burst + ⌊(d-1)/T⌋, for d = Period, d = Burst·T
// (the "burst/rate" window) and d = T.
func TestPacingBound(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(13, uint64(l.Rate)))
			p := ParamsOf(l)
			var s State
			now := epoch
			type pending struct {
				r  Reservation
				id int
			}
			var open []pending
			used := map[int]event{}
			var returned, kept int
			for i := 0; i < 20000; i++ {
				// Alternate calm spells with busy ones, where reservations queue up.
				if i/1000%2 == 0 {
					now += rng.Int64N(p.T*2 + 1)
				} else {
					now += rng.Int64N(p.T/3 + 1)
				}
				n := 1 + rng.Int64N(min(p.MaxCost(), 3))
				switch op := rng.IntN(10); {
				case op < 6:
					var r Reservation
					s, r = ReserveGCRA(s, now, p, n, []int64{-1, p.T, 0}[rng.IntN(3)])
					if r.OK {
						used[i] = event{r.At, n}
						open = append(open, pending{r, i})
						if len(open) > 64 { // old reservations are long overtaken
							open = slices.Delete(open, 0, 1)
						}
					}
				case op < 8:
					var res Result
					s, res = Decide(s, now, p, n)
					if res.Allowed {
						used[i] = event{now, n}
					}
				default:
					if len(open) == 0 {
						continue
					}
					// An old one, or usually one of the latest two.
					j := max(0, len(open)-1-rng.IntN(2))
					if rng.IntN(4) == 0 {
						j = rng.IntN(len(open))
					}
					c := open[j]
					open = slices.Delete(open, j, j+1)
					var ok bool
					if s, ok = CancelReservation(s, now, c.r); ok {
						delete(used, c.id)
						returned++
					} else {
						kept++
					}
				}
			}
			if returned == 0 || kept == 0 {
				t.Fatalf("cancellations: %d returned, %d kept; the test needs both", returned, kept)
			}
			var ev []event
			for _, e := range used {
				ev = append(ev, e)
			}
			slices.SortFunc(ev, func(a, b event) int { return int(a.t - b.t) })
			for _, d := range []int64{p.Period, p.Burst * p.T, p.T} {
				if got, b := maxInWindow(ev, d), windowBound(p, d); got > b {
					t.Fatalf("%d units used in an interval of %dµs, bound %d", got, d, b)
				}
			}
		})
	}
}

// TestCancelUndoesExactly: a reservation cancelled before its instant with nothing spent
// since leaves a state that decides exactly as if it had never been made; one that was
// overtaken, or whose instant has come, gives nothing back.
func TestCancelUndoesExactly(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(14, uint64(l.Rate)))
			p := ParamsOf(l)
			var base State
			now := epoch
			for i := 0; i < 5000; i++ {
				now += randomStep(rng, now, p) / 3
				// Some backlog first, so that reservations wait.
				for k := rng.IntN(3); k > 0; k-- {
					base, _ = ReserveGCRA(base, now, p, 1+rng.Int64N(p.MaxCost()), -1)
				}
				n := 1 + rng.Int64N(min(p.MaxCost(), 3))
				s, r := ReserveGCRA(base, now, p, n, -1)
				later := now + rng.Int64N(r.Delay+2)
				switch rng.IntN(3) {
				case 0: // nothing in between
					got, ok := CancelReservation(s, later, r)
					if want := later < r.At; ok != want {
						t.Fatalf("step %d: cancel at +%d of delay %d: %v", i, later-now, r.Delay, ok)
					}
					if ok {
						sameFuture(t, p, got, base, later, rng)
					} else if got != s {
						t.Fatal("a refused cancel changed the state")
					}
				case 1: // a later reservation overtakes it
					s2, _ := ReserveGCRA(s, later, p, 1, -1)
					if got, ok := CancelReservation(s2, later, r); ok || got != s2 {
						t.Fatalf("step %d: an overtaken reservation was given back", i)
					}
				default: // a later reservation is cancelled first: r is last again
					s2, r2 := ReserveGCRA(s, later, p, 1, -1)
					s3, ok2 := CancelReservation(s2, later, r2)
					got, ok := CancelReservation(s3, later, r)
					if ok2 != (later < r2.At) {
						t.Fatalf("step %d: cancel of the later one: %v", i, ok2)
					}
					if ok2 && ok != (later < r.At) {
						t.Fatalf("step %d: r is last again but cancel gave %v", i, ok)
					}
					if ok {
						sameFuture(t, p, got, base, later, rng)
					}
				}
				base = s
			}
		})
	}
}

// sameFuture checks that states a and b make the same decisions from now on.
func sameFuture(t *testing.T, p Params, a, b State, now int64, rng *rand.Rand) {
	t.Helper()
	for k := 0; k < 6; k++ {
		now += rng.Int64N(p.T + 1)
		n := rng.Int64N(p.MaxCost() + 1)
		var ra, rb Result
		a, ra = Decide(a, now, p, n)
		b, rb = Decide(b, now, p, n)
		if ra != rb {
			t.Fatalf("after cancel: %+v, never reserved: %+v", ra, rb)
		}
	}
}
