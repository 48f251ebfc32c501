package overload

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// choices is where a driven run takes its decisions: a seeded generator or fuzz input.
type choices interface {
	// intn returns a choice in [0, n), and false when the input is spent.
	intn(n int) (int, bool)
}

type seeded struct {
	r    *rand.Rand
	left int
}

func (s *seeded) intn(n int) (int, bool) {
	if s.left == 0 {
		return 0, false
	}
	s.left--
	return s.r.IntN(n), true
}

type fuzzBytes []byte

func (b *fuzzBytes) intn(n int) (int, bool) {
	if len(*b) == 0 {
		return 0, false
	}
	v := int((*b)[0]) % n
	*b = (*b)[1:]
	return v, true
}

// drive runs Acquire (each criticality, queueing when it must), Release, Drop, clock
// steps forward and back and cancellations on l as ch decides, checking after each
// step the invariants the package doc states:
//   - the limit is within [MinLimit, MaxLimit];
//   - an admission never takes in flight above the limit;
//   - at the same state, a Sheddable request is admitted only if a Default one would
//     be, and a Default one only if a Critical one would be;
//   - a request is shed for the limit only when it could not be admitted;
//   - no waiter is left that its share would admit (waiters are served as permits free);
//
// and at the end, with every waiter gone and every permit ended, nothing is in flight.
func drive(t *testing.T, l *Limiter, clk *fakeClock, ch choices) {
	t.Helper()
	start := waitQueued(l)
	var held []*Permit
	var waiters []<-chan acquired
	var cancels []context.CancelFunc
	collect := func(block bool) {
		kept := waiters[:0]
		for _, w := range waiters {
			var r acquired
			if block {
				r = <-w
			} else {
				select {
				case r = <-w:
				default:
					kept = append(kept, w)
					continue
				}
			}
			if r.err == nil {
				held = append(held, r.p)
			} else if !errors.As(r.err, new(*Shed)) {
				t.Fatalf("a waiter's error is not a *Shed: %v", r.err)
			}
		}
		waiters = kept
	}
	check := func(step string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		lim := l.g.permits(&l.s)
		if lim < l.s.min || lim > l.s.max || l.g.limit < l.s.min*1000 || l.g.limit > l.s.max*1000 {
			t.Fatalf("%s: limit %d (%d milli) outside [%d, %d]", step, lim, l.g.limit, l.s.min, l.s.max)
		}
		if l.inflight < 0 {
			t.Fatalf("%s: %d in flight", step, l.inflight)
		}
		if l.admits(Sheddable) && !l.admits(Default) || l.admits(Default) && !l.admits(Critical) {
			t.Fatalf("%s: shares out of order at %d in flight, limit %d", step, l.inflight, lim)
		}
		for c := Default; c <= Critical; c++ {
			if l.waiting[c].Len() > 0 && l.inflight < l.share(c) {
				t.Fatalf("%s: a %v request waits with %d in flight, below its share %d", step, c, l.inflight, l.share(c))
			}
		}
	}
	for step := 0; ; step++ {
		op, ok := ch.intn(8)
		if !ok {
			break
		}
		arg, _ := ch.intn(256)
		switch op {
		case 0, 1, 2: // Acquire
			c := Criticality(arg%3 - 1)
			l.mu.Lock()
			could, before := l.admits(c), l.inflight
			l.mu.Unlock()
			ctx, cancel := context.WithCancel(context.Background())
			out := start(ctx, c)
			select {
			case r := <-out:
				cancel()
				var s *Shed
				switch {
				case r.err == nil:
					held = append(held, r.p)
					if st := l.Stats(); st.InFlight > st.Limit && st.InFlight > int(before) {
						t.Fatalf("step %d: admitted a %v request to %d in flight, limit %d", step, c, st.InFlight, st.Limit)
					}
				case !errors.As(r.err, &s):
					t.Fatalf("step %d: %v", step, r.err)
				case s.Reason == ReasonLimit && could:
					t.Fatalf("step %d: a %v request was shed for the limit though it could be admitted", step, c)
				case s.RetryAfter < time.Second || s.RetryAfter%time.Second != 0:
					t.Fatalf("step %d: RetryAfter %v", step, s.RetryAfter)
				}
			default:
				waiters, cancels = append(waiters, out), append(cancels, cancel)
			}
		case 3, 4: // end a permit, after its latency
			if len(held) == 0 {
				continue
			}
			clk.advance(time.Duration(arg) * time.Millisecond)
			i := arg % len(held)
			if op == 3 {
				held[i].Release()
			} else {
				held[i].Drop()
			}
			held = append(held[:i], held[i+1:]...)
		case 5: // the clock steps
			clk.advance(time.Duration(arg-64) * 10 * time.Millisecond)
		case 6: // a waiting client gives up
			if len(cancels) > 0 {
				cancels[arg%len(cancels)]()
			}
		case 7:
			l.Stats()
		}
		collect(false)
		check("after step")
	}
	for _, cancel := range cancels {
		cancel()
	}
	collect(true)
	for _, p := range held {
		p.Release()
	}
	check("at the end")
	if st := l.Stats(); st.InFlight != 0 || st.Queued != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

func TestProperties(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 42))
		cfg := Config{
			MinLimit: 1 + r.IntN(4), MaxLimit: 5 + r.IntN(40), InitialLimit: r.IntN(30),
			Window: time.Duration(1+r.IntN(500)) * time.Millisecond, MinSamples: r.IntN(5),
			LongWindow: 1 + r.IntN(20), Tolerance: r.IntN(200), Headroom: r.IntN(3),
			Remeasure:       time.Duration(r.IntN(5000)-500) * time.Millisecond,
			CriticalReserve: r.IntN(50) - 5, DefaultReserve: r.IntN(40),
			MaxWait: time.Hour, MaxQueue: 1 + r.IntN(10),
		}
		l, clk := newLimiter(t, cfg)
		drive(t, l, clk, &seeded{r: r, left: 6000})
	}
}

// FuzzLimiter: any configuration New accepts, driven by any sequence of operations,
// keeps the invariants drive checks, and never panics.
func FuzzLimiter(f *testing.F) {
	f.Add([]byte{4, 20, 10, 5, 3, 10, 50, 0, 100, 40, 10, 0, 4, 0, 1, 2, 3, 4, 5, 6, 7, 0, 3})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 2, 0, 2, 0, 0, 7, 3, 5, 4, 9, 6, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 1, 2, 1, 3, 200, 3, 200, 3, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		b := func(n int) int { v, _ := in.intn(n); return v }
		cfg := Config{
			MinLimit: b(8), MaxLimit: b(64), InitialLimit: b(64),
			Window: time.Duration(b(256)-8) * time.Millisecond, MinSamples: b(16) - 1,
			LongWindow: b(32) - 1, Tolerance: b(256) * 5, Headroom: b(8) - 1,
			Remeasure:       time.Duration(b(256)-128) * 50 * time.Millisecond,
			CriticalReserve: b(128) - 8, DefaultReserve: b(128) - 8,
			MaxWait: []time.Duration{-1, 0, time.Hour}[b(3)], MaxQueue: b(8) - 1,
		}
		clk := &fakeClock{}
		clk.ns.Store(int64(b(256)) << 32)
		cfg.Clock = clk.now
		l, err := New(cfg)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		drive(t, l, clk, &in)
	})
}
