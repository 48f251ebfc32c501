package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// reservableLimits has each name of the bucket machine with S = 1 (a one-word TAT) and
// with S > 1 (a two-word TAT).
func reservableLimits() []sluice.Limit {
	return []sluice.Limit{
		sluice.PerSecond(10),
		sluice.PerSecond(10).With(sluice.TokenBucket),
		sluice.PerSecond(10).With(sluice.LeakyBucket),
		{Algorithm: sluice.GCRA, Rate: 3, Period: time.Second, Burst: 2},
		{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Second, Burst: 2},
		{Algorithm: sluice.LeakyBucket, Rate: 3, Period: time.Second, Burst: 2},
	}
}

func TestReserveQueuesAtTheRate(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			s, clock := newTestStore(t)
			ctx := context.Background()
			// The k-th slot after the burst is k·Period/Rate away, rounded up to a whole µs.
			slot := func(k int64) time.Duration {
				return time.Duration((k*l.Period.Microseconds()+l.Rate-1)/l.Rate) * time.Microsecond
			}
			burst := store.EffectiveBurst(l)
			for i := int64(0); i < burst+5; i++ {
				r, err := s.Reserve(ctx, "k", l, 1)
				if err != nil {
					t.Fatal(err)
				}
				want := slot(max(0, i-burst+1))
				if !r.OK || r.Delay != want || r.N != 1 || r.Limit != l {
					t.Fatalf("reservation %d: %+v, want OK with delay %v", i, r, want)
				}
			}
			// AllowN shares the state: the key is booked ahead, so it is denied now and
			// RetryAfter is the next free slot.
			d, err := s.AllowN(ctx, "k", l, 1)
			if err != nil || d.Allowed || d.RetryAfter != slot(6) {
				t.Fatalf("AllowN after reservations: %+v %v, want denied with RetryAfter %v", d, err, slot(6))
			}
			clock.Advance(slot(6))
			if d, _ := s.AllowN(ctx, "k", l, 1); !d.Allowed {
				t.Fatalf("AllowN at the next free slot denied: %+v", d)
			}
		})
	}
}

func TestReserveCancelReturnsTheSlot(t *testing.T) {
	for _, l := range reservableLimits() {
		t.Run(l.String(), func(t *testing.T) {
			s, clock := newTestStore(t)
			ctx := context.Background()
			burst := store.EffectiveBurst(l)
			if _, err := s.Reserve(ctx, "k", l, burst); err != nil { // empty the bucket
				t.Fatal(err)
			}
			first, _ := s.Reserve(ctx, "k", l, 1)
			second, _ := s.Reserve(ctx, "k", l, 1)
			if first.Delay == 0 || second.Delay <= first.Delay {
				t.Fatalf("delays %v, %v: want two queued reservations", first.Delay, second.Delay)
			}
			// The first is overtaken by the second: nothing comes back.
			if ok, err := first.Cancel(ctx); ok || err != nil {
				t.Fatalf("overtaken reservation given back: %v %v", ok, err)
			}
			// The second is the latest: its slot comes back, once.
			if ok, err := second.Cancel(ctx); !ok || err != nil {
				t.Fatalf("latest reservation not given back: %v %v", ok, err)
			}
			if ok, _ := second.Cancel(ctx); ok {
				t.Fatal("a second Cancel gave the slot back again")
			}
			again, _ := s.Reserve(ctx, "k", l, 1)
			if again.Delay != second.Delay {
				t.Fatalf("after cancel the next reservation waits %v, want the returned slot at %v", again.Delay, second.Delay)
			}
			// Once its instant has come, a reservation cannot be given back.
			clock.Advance(again.Delay)
			if ok, _ := again.Cancel(ctx); ok {
				t.Fatal("a reservation whose instant has come was given back")
			}
		})
	}
}

func TestReserveRefusesBeyondTheDeadline(t *testing.T) {
	s, _ := newTestStore(t)
	l := sluice.PerSecond(10)
	ctx := context.Background()
	if _, err := s.Reserve(ctx, "k", l, 10); err != nil {
		t.Fatal(err)
	}
	// The next slot is 100ms away on the store's (frozen) clock.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	r, err := s.Reserve(short, "k", l, 1)
	if err != nil || r.OK || r.Delay != 100*time.Millisecond {
		t.Fatalf("reserve with a 50ms deadline: %+v %v, want refused with delay 100ms", r, err)
	}
	if ok, _ := r.Cancel(ctx); ok {
		t.Fatal("a refused reservation was cancelled")
	}
	long, cancel2 := context.WithTimeout(ctx, time.Hour)
	defer cancel2()
	if r, err := s.Reserve(long, "k", l, 1); err != nil || !r.OK || r.Delay != 100*time.Millisecond {
		t.Fatalf("the refusal spent something: next reservation %+v %v", r, err)
	}
}

func TestReserveBadInput(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	cases := []struct {
		key   string
		limit sluice.Limit
		n     int64
		want  error
	}{
		{"k", sluice.PerSecond(5).With(sluice.FixedWindow), 1, sluice.ErrInvalidLimit},
		{"k", sluice.PerSecond(5).With(sluice.SlidingWindow), 1, sluice.ErrInvalidLimit},
		{"k", sluice.PerSecond(5).With(sluice.SlidingLog), 1, sluice.ErrInvalidLimit},
		{"k", sluice.Limit{}, 1, sluice.ErrInvalidLimit},
		{"k", sluice.PerSecond(5), 6, sluice.ErrCostExceedsLimit},
		{"k", sluice.PerSecond(5), -1, sluice.ErrInvalidCost},
		{"", sluice.PerSecond(5), 1, sluice.ErrInvalidKey},
	}
	for _, c := range cases {
		if _, err := s.Reserve(ctx, c.key, c.limit, c.n); !errors.Is(err, c.want) {
			t.Errorf("Reserve(%q, %v, %d) = %v, want %v", c.key, c.limit, c.n, err, c.want)
		}
	}
	s.Close()
	if _, err := s.Reserve(ctx, "k", sluice.PerSecond(5), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("closed store: %v", err)
	}
}
