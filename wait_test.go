package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/memory"
)

// timers is a timer source for sluice.WaitWithTimer that the test fires: each timer Wait
// asks for arrives on asked (so the test knows Wait is asleep), and receives when the
// test sends on fire.
type timers struct {
	asked chan time.Time
	fire  chan time.Time
}

func newTimers() *timers {
	return &timers{asked: make(chan time.Time, 1), fire: make(chan time.Time)}
}

func (ts *timers) new(at time.Time) (<-chan time.Time, func() bool) {
	ts.asked <- at
	return ts.fire, func() bool { return true }
}

// TestWait: Wait sleeps until the reserved instant (a timer for it, and no return before
// it fires), returns at once when the instant has come, is refused without sleeping or
// spending when the instant falls after its deadline, gives the slot back when its context
// ends while it sleeps, and reserves nothing for a done context. The store's clock stands
// still, so each reservation's instant is exact; Wait's timers are the test's.
func TestWait(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clk.Now))
	t.Cleanup(func() { s.Close() })
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 10 * time.Second, Burst: 1}
	ts := newTimers()
	wait := func(ctx context.Context, key string) chan error {
		done := make(chan error, 1)
		go func() { done <- sluice.WaitWithTimer(ctx, s, key, l, 1, ts.new) }()
		return done
	}
	// asleep returns the instant Wait sleeps until, failing the test if Wait returns first.
	asleep := func(done chan error) time.Time {
		t.Helper()
		select {
		case at := <-ts.asked:
			return at
		case err := <-done:
			t.Fatalf("Wait returned %v without sleeping", err)
		}
		return time.Time{}
	}

	// The burst: at once, no timer.
	if err := <-wait(ctx, "paced"); err != nil {
		t.Fatal(err)
	}
	// The next unit is 10s away on the store's clock: Wait sleeps until then.
	reserved := time.Now()
	done := wait(ctx, "paced")
	at := asleep(done)
	// The store answered between reserved and now; At is its answer's time plus Delay.
	if now := time.Now(); at.Before(reserved.Add(10*time.Second)) || at.After(now.Add(10*time.Second)) {
		t.Fatalf("Wait sleeps until %v, want 10s (the reservation's Delay) after a time in [%v, %v]", at, reserved, now)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before its timer fired", err)
	default:
	}
	ts.fire <- at
	if err := <-done; err != nil {
		t.Fatalf("Wait after its timer fired: %v", err)
	}

	// A Wait whose context ends while it sleeps returns the context's error and gives its
	// slot back: the next reservation is the same 20s away, not 30s.
	wctx, cancel := context.WithCancel(ctx)
	done = wait(wctx, "paced")
	asleep(done)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait returned %v, want context.Canceled", err)
	}
	r, err := s.Reserve(ctx, "paced", l, 1)
	if err != nil || r.Delay != 20*time.Second {
		t.Fatalf("after the cancelled Wait the next reservation waits %v (%v), want 20s", r.Delay, err)
	}

	// A deadline before the reserved instant is refused without sleeping, spending nothing.
	dctx, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if err := <-wait(dctx, "paced"); !errors.Is(err, sluice.ErrWaitExceedsDeadline) {
		t.Fatalf("Wait beyond the deadline: %v, want ErrWaitExceedsDeadline", err)
	}
	if r2, _ := s.Reserve(ctx, "paced", l, 1); r2.Delay != r.Delay+10*time.Second {
		t.Fatalf("the refused Wait spent a slot: delays %v then %v, want 10s apart", r.Delay, r2.Delay)
	}

	// A done context is not even reserved.
	if err := <-wait(wctx, "fresh"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done context: %v", err)
	}
	if d, _ := s.AllowN(ctx, "fresh", l, 0); !d.Allowed {
		t.Fatal("Wait with a done context spent quota")
	}
	select {
	case at := <-ts.asked:
		t.Fatalf("Wait slept until %v where it should have returned at once", at)
	default:
	}
}
